"""What a Hugging Face model's head is for, read from the class its config names.

A ``save_pretrained`` folder names its class in ``config.architectures``: that class is built,
head and all, so its weights load as saved. Its role decides what the model's forward returns
and what actviz does with it: class scores (``...ForImageClassification``), class maps drawn
as for torchvision's segmentation models (``...ForSemanticSegmentation``), detection outputs
(``...ForObjectDetection``: the head runs, the backbone's feature maps are drawn, and one
warning says that drawing detections is not supported yet), or features (a bare model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Head", "HeadWarning", "model_head"]

#: The class-name endings of the heads actviz reads, and their roles.
_ROLES = (
    ("ForImageClassificationWithTeacher", "classifier"),
    ("ForImageClassification", "classifier"),
    ("ForSemanticSegmentation", "segmentation"),
    ("ForObjectDetection", "detection"),
)


class HeadWarning(UserWarning):
    """A model's head runs but its output is not drawn (detection); the CLI prints it as a
    warning line."""


@dataclass(frozen=True)
class Head:
    """The class to build for a config, and what its output is.

    Attributes:
        cls: The transformers class (``AutoModel`` for a config that names no known head).
        name: The class's name, as ``config.architectures`` gives it.
        role: ``classifier``, ``segmentation``, ``detection``, ``other`` (a head actviz does
            not read, such as depth estimation) or ``backbone``.
    """

    cls: Any
    name: str
    role: str

    @property
    def field(self) -> str:
        """The output field the model's forward returns: ``logits``, or a backbone's
        ``last_hidden_state`` (else the output's first tensor)."""
        return "last_hidden_state" if self.role in ("backbone", "other") else "logits"

    @property
    def scores(self) -> bool:
        """True when the output holds class scores per image or per pixel (top-k predictions,
        Grad-CAM and class names apply)."""
        return self.role in ("classifier", "segmentation")

    def note(self, model: str) -> str | None:
        """The warning for a head whose output is not drawn; None for the others."""
        if self.role == "detection":
            return (
                f"{model} is a {self.name}: drawing its detections is not supported yet; its "
                "detection head is loaded and run, and the backbone's feature maps are drawn"
            )
        if self.role == "other":
            return (
                f"{model} is a {self.name}: drawing that head's output is not supported yet; "
                "its layers' feature maps are drawn"
            )
        return None

    def construct(self, config: Any) -> Any:
        """The model, built from ``config`` with random weights."""
        if hasattr(self.cls, "from_config"):  # an Auto class
            return self.cls.from_config(config)
        return self.cls._from_config(config)


def model_head(config: Any, transformers: Any) -> Head:
    """The class ``config.architectures`` names, with its role; ``AutoModel`` (a backbone)
    when it names none that ``transformers`` has."""
    for name in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, str(name), None)
        if cls is None:
            continue
        role = next((r for suffix, r in _ROLES if name.endswith(suffix)), None)
        if role is None:
            role = "other" if "For" in name else "backbone"
        return Head(cls, str(name), role)
    return Head(transformers.AutoModel, "AutoModel", "backbone")
