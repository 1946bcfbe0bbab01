"""The ``nn.Module`` implementations of components, imported when a component is built (not when it is checked)."""
