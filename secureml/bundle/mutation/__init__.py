"""The tenant's MutatingAdmissionPolicy: `secureml.pods.mutation`'s data as JSON-patch CEL."""
