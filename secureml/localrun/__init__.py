"""`secureml run --local`: a pipeline on this machine under the same launcher as in a cluster."""
