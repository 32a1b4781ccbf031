"""What the cluster adds to a secure step at admission, defined once.

KFP cannot express a read-only root filesystem, CSI or downward-API volumes, pod annotations set by
the platform, or DRA claims (docs/architecture.md, "What KFP can express"). The tenant bundle's
MutatingAdmissionPolicy adds them, keyed on the labels the compiler sets. One module per step:

- `model`: the mutation data types (`PodMutation`, `Operation`, `LabelIs`, `FromLabel`);
- `catalogue`: `mutations_for_profile`, the tenant's mutations as data;
- `groups`: the operations grouped by the path they write (one JSON-patch operation each);
- `apply`: `apply_mutations`, the same data applied in Python, so the compiler's preview and
  `secureml check-pod` see the pod the cluster would admit;
- `jsonpatch_cel`: the data compiled to the policy's JSONPatch CEL expression;
- `policy`: the MutatingAdmissionPolicy and its binding.

Semantics of both: every operation is computed from the pod as submitted and touches its own
path. `append` adds items to a list (creating it and any missing parent); `set` writes a value
(creating missing parents, replacing what is there). Appends never deduplicate: a pod that
already has a volume or mount of the same name or path becomes invalid and the API server rejects
it, which is the intended fail-closed answer to a pod that tries to pre-empt a platform volume.
Operations run once per admission (`reinvocationPolicy: Never`).
"""
