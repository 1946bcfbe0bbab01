"""Pure tensor maths behind the components: expansions, compressions, kernels, reconciliations, structures."""
