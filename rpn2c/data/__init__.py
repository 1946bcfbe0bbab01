"""Data layer for ``rpn2c train``: built-in offline datasets, readers for user files, DataLoader helper.

    from rpn2c.data import load, available, load_path, make_loader
    ds = load("digits", seed=0)                 # Dataset(train=(x, y), test=(x, y), num_classes=10, ...)
    batches = make_loader(ds, "train", batch_size=64, seed=0)
    user = load_path("mnist", "~/data/mnist")   # or "cifar", "cora", "planetoid", "csv", "ucr", "text"

The names are imported on first use: what the data sets are (``available``, ``FILE_KINDS``) needs
neither torch nor numpy (``rpn2c.data.catalog``), so ``rpn2c data`` prints its table without them.
"""

from rpn2c.lazy import lazy_exports

_EXPORTS = {
    ".dataset": ("Dataset", "TASKS", "fit_standardizer", "forecasting_dataset", "stratified_split", "window_series"),
    ".citation": ("Graph", "load_citation", "load_cora", "load_planetoid", "per_class_split", "read_cora"),
    ".formats": ("LOADERS", "TsData", "load_cifar", "load_csv_series", "load_mnist", "load_path", "load_ucr",
                 "read_cifar_batch", "read_csv_series", "read_idx", "read_ts"),
    ".text": ("load_text", "read_glove", "tokenize"),
    ".loader": ("make_loader",),
    ".catalog": ("FILE_KINDS", "available"),
    ".registry": ("load",),
    ".safe_pickle": ("UnsafePickleError", "safe_load"),
}

__all__ = [
    "Dataset", "TASKS", "available", "load", "load_path", "make_loader", "LOADERS", "FILE_KINDS",
    "read_idx", "load_mnist", "read_cifar_batch", "load_cifar", "read_cora", "load_cora", "load_planetoid",
    "load_citation", "per_class_split", "load_text", "read_glove", "tokenize",
    "read_csv_series", "load_csv_series", "read_ts", "load_ucr", "Graph", "TsData",
    "safe_load", "UnsafePickleError", "stratified_split", "fit_standardizer", "window_series", "forecasting_dataset",
]

__getattr__, __dir__ = lazy_exports(__name__, {name: module for module, names in _EXPORTS.items() for name in names},
                                    globals())
