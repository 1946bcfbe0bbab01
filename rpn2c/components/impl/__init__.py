"""The nn.Module implementations of components, imported by the components when they build."""
