"""Supply chain: Sigstore verification of images, bundles and signed profiles.

Modules (each imports sigstore itself; import them only where verification happens):

- `trust`     trusted roots (`production`, `staging`, a file), loaded offline; cached verifiers
- `identity`  signers and trusted identities (exact subject or regexp, plus issuer)
- `verifier`  `SignatureVerifier.verify_image` / `.verify_artifact`, failures with reasons
- `registry`  fetching bundles over OCI (referrers API, `sha256-<hex>` tag fallback) with oras
- `compile`   `verify_images_for_compile`, `verify_attestations_for_compile`: per-step results
- `attestations` the profile's required in-toto attestations, found and verified per image
- `predicates` the predicate types a profile can require and their content checks (no sigstore)
- `profiles`  signed TenantProfiles (`--require-signed-profile`, `secureml profile verify`)
"""
