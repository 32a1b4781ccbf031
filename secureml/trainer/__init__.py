"""Multi-node training through Kubeflow Trainer v2 (docs/trainer.md).

A `@secure_component(..., nodes=N, trainer_runtime=R)` step compiles to a KFP task that creates
one TrainJob (`trainer.kubeflow.org/v1alpha1`). The compiler builds the TrainJob here
(`manifest.py`), checks the step against the profile's `spec.trainer` (`checks.py`) and previews
the node pods Trainer and JobSet would create from it (`pods.py`) so the tenant's pod rules judge
them at compile time; in the step, `submit.py` creates the TrainJob, waits, reports and deletes it;
`rules.py` is the admission policy on TrainJob objects.
"""
