"""The shipped weight maps (:mod:`rpn2c.frontends.weights`): one module per shipped spec file, each declaring
``MAPS``, its models' maps by name."""
