"""`spec.gpu.confidentialComputing: required`: which tiers and GPU models may ask for it."""

from __future__ import annotations

from collections.abc import Sequence

from secureml.nvidia.catalogue import MIG_CATALOGUE

CC_TIERS = ("confidential", "restricted")
_PATH = "spec.gpu.confidentialComputing"


def cc_models() -> list[str]:
    """The catalogue's models with a confidential-computing mode, in catalogue order."""
    return [name for name, model in MIG_CATALOGUE.items() if model.confidential_computing]


def confidential_problems(
    tier: str, confidential_computing: str, models: Sequence[str]
) -> list[tuple[str, str]]:
    """(YAML path, message) for a CC requirement the tier or the pool's GPU `models` cannot
    honour (`spec.tier`, `spec.gpu.confidentialComputing`, `spec.gpu.models`)."""
    if confidential_computing != "required":
        return []
    problems: list[tuple[str, str]] = []
    if tier not in CC_TIERS:
        problems.append(
            (
                _PATH,
                f"confidentialComputing: required is for tiers {' and '.join(CC_TIERS)}; tier "
                f"{tier} makes no isolation promise for it to back; raise the tier or set it to off",
            )
        )
    capable = cc_models()
    if not models:
        problems.append(
            (
                "spec.gpu.models",
                "confidentialComputing: required needs the pool's GPU models listed, all of them "
                f"CC-capable ({', '.join(capable)})",
            )
        )
    for index, name in enumerate(models):
        if name not in capable:
            problems.append(
                (
                    f"spec.gpu.models[{index}]",
                    f"{name} has no confidential-computing mode; with confidentialComputing: "
                    f"required list only {', '.join(capable)}",
                )
            )
    return problems
