"""The tenant's MutatingAdmissionPolicy: `secureml.pods.mutation`'s data as JSON-patch CEL.

`jsonpatch_cel` compiles the mutations to the policy's JSONPatch expression; `policy` renders the
MutatingAdmissionPolicy and its binding.
"""
