"""`secureml doctor`: checks a platform team runs on a GPU node, a cluster, or a node's logs."""
