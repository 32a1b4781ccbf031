"""`secureml doctor`: checks a platform team runs on a GPU node, a cluster, or a node's logs.

Each check answers pass / warn / fail with what it saw and the fix (`check.Check`); the three
sources live in their own modules (`node`, `cluster`, `logs`) and share the report format here.
"""
