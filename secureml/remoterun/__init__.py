"""`secureml run --host` and `doctor pipeline`: a compiled pipeline run on a Kubeflow Pipelines
server through `kfp.Client`, followed to its end, its admission refusals and audit records read back.
"""
