"""Which module each local name stands for, so rules match ``np.concatenate`` and ``cat`` alike."""

from __future__ import annotations

import ast

#: Spellings of the same API, reduced to one: rules match the right-hand side only.
_SAME_API = (
    ("tensorflow.keras.", "keras."),
    ("tensorflow.python.keras.", "keras."),
    ("tf_keras.", "keras."),
    ("keras.src.", "keras."),
    ("pytorch_lightning.", "lightning.pytorch."),
    ("lightning.pytorch.callbacks.early_stopping.", "lightning.pytorch.callbacks."),
    ("lightning.pytorch.callbacks.model_checkpoint.", "lightning.pytorch.callbacks."),
    ("torch.utils.data.dataloader.", "torch.utils.data."),
)


def normalise(qualname: str) -> str:
    dotted = qualname + "."
    for spelling, canonical in _SAME_API:
        if dotted.startswith(spelling):
            dotted = canonical + dotted[len(spelling) :]
    return dotted[:-1]


def import_map(tree: ast.Module) -> dict[str, str]:
    """Local name → dotted module path, from every import in the module (functions included:
    scripts often import inside ``main``). Relative imports keep their leading dots."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    names[head] = head
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name != "*":
                    names[alias.asname or alias.name] = f"{module}.{alias.name}" if module else alias.name
    return names
