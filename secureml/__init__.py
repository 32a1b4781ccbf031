"""secureml: Kubeflow Pipelines that are safe to run on GPUs shared between tenants."""

from __future__ import annotations

__version__ = "0.1.0"
