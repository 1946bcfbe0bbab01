"""The training settings' defaults, without pydantic: ``TrainConfig`` declares its fields with them, and the
``rpn2c train`` parser shows them in its help (building the parser of any ``rpn2c`` command imports this)."""

DEFAULTS = {"data": "digits", "epochs": 20, "batch_size": 32, "lr": 3e-3, "weight_decay": 1e-4, "schedule": "cosine",
            "seed": 0, "device": "auto", "compile": False, "strategy": "auto", "eval_batch_size": 1024, "threads": 1,
            "val_fraction": 0.1, "patience": None, "objective": "task", "mask_rate": 0.15, "mask_id": None}
