"""``fastep info``: what a saved model holds (:func:`fastep.persistence.describe_model`)."""
from __future__ import annotations


def cmd_info(args):
    from fastep.persistence import describe_model
    for key, value in describe_model(args.model).items():
        if isinstance(value, list) and key == "kernel":      # one per class
            value = ("\n" + " " * 17).join(str(v) for v in value)
        elif isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        print(f"{key + ':':<17}{value}")
    return 0
