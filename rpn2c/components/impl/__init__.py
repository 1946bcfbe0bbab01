"""The torch implementations (``nn.Module`` classes) of the components, imported only when a model is built."""
