"""Training workflow for compiled specs: bind a dataset, fit, evaluate, predict, checkpoint, plot.

    from rpn2c.train import TrainConfig, bind, fit, evaluate, seed_everything
    cfg = TrainConfig(epochs=20)
    seed_everything(cfg.seed)
    model = rpn2c.compile_file("specs/cnn.rpn")
    ds = rpn2c.data.load("digits", seed=cfg.seed)
    binding = bind(model.graph, ds)
    model, history = fit(model, ds, binding, cfg)   # epochs scored on a validation split; history.stopped says why

A run's options, folder and run.yaml are :mod:`rpn2c.train.run`; the command line is ``rpn2c.runtime.train_cli``
(``train``), ``rpn2c.runtime.predict_cli`` (``eval``, ``predict``) and ``rpn2c.runtime.show``.
"""

from rpn2c.lazy import lazy_exports

_EXPORTS = {
    "Binding": "binding", "bind": "binding",
    "BindError": "config", "CheckpointMismatch": "config", "ConfigError": "run", "RunConfig": "config", "TrainConfig": "config",
    "TrainError": "config", "History": "loop", "evaluate": "loop", "fit": "loop", "loss_fn": "loop",
    "predict": "loop", "seed_everything": "loop",
}
__all__ = ["BindError", "Binding", "CheckpointMismatch", "ConfigError", "History", "RunConfig", "TrainConfig", "TrainError", "bind",
           "evaluate", "fit", "loss_fn", "predict", "seed_everything"]


# lazy exports: ``import rpn2c.train.config`` (the CLI parser) does not pull in torch and the datasets
__getattr__ = lazy_exports(__name__, {name: f".{module}" for name, module in _EXPORTS.items()}, globals())[0]
