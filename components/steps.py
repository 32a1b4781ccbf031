"""The bodies of the library's steps.

KFP ships each function's source text into the pod, so every body imports what it uses; the work
itself is done by secureml modules the step image carries (the launcher stages, the supply-chain
verifier, the audit report). `secureml.components` turns these into components.
"""

from kfp import dsl


def gpu_preflight(report: dsl.Output[dsl.Artifact]) -> str:
    """Check the GPUs this step was given against its request (NVML); write the findings as JSON.

    Returns the UUIDs of the devices that passed, comma-separated.
    """
    import json

    from secureml.enforcement.config import load_config
    from secureml.enforcement.preflight import run_preflight

    config = load_config()
    if config.gpu_request is None:
        raise SystemExit(
            "gpu_preflight needs a GPU request: build it with gpu=MIG/TimeSlice/WholeGPU"
        )
    found = run_preflight(config.gpu_request, isolation=config.isolation)
    with open(report.path, "w", encoding="utf-8") as handle:
        json.dump(found, handle, indent=2, sort_keys=True)
    return ",".join(device["uuid"] for device in found["devices"])


def gpu_scrub(
    verify: str, report: dsl.Output[dsl.Artifact], metrics: dsl.Output[dsl.Metrics]
) -> float:
    """Zero the free memory of every GPU this step can reach and verify it (`sample` or `full`).

    Returns the coverage: the fraction of the devices' memory that was zeroed.
    """
    import json

    from secureml.enforcement.scrub import scrub_devices

    if verify not in ("off", "sample", "full"):
        raise SystemExit(f"verify must be off, sample or full, not {verify!r}")
    result = scrub_devices(verify)  # type: ignore[arg-type]  # one of the three, checked above
    with open(report.path, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2, sort_keys=True)
    metrics.log_metric("zeroed_bytes", result["zeroed_bytes"])
    metrics.log_metric("coverage", result["coverage"])
    if result["gb_per_s"] is not None:
        metrics.log_metric("gb_per_s", result["gb_per_s"])
    return float(result["coverage"])


def verify_image(
    image: str,
    bundle: dsl.Input[dsl.Artifact],
    issuer: str,
    verification: dsl.Output[dsl.Artifact],
    subject: str = "",
    subject_regexp: str = "",
    trusted_root: str = "production",
) -> str:
    """Verify the Sigstore bundle of a digest-pinned image offline; fail the step if it does not.

    Returns the signer that matched (certificate subject).
    """
    import json
    from dataclasses import asdict
    from pathlib import Path

    from secureml.core.errors import SecuremlError
    from secureml.supplychain.identity import TrustedIdentity
    from secureml.supplychain.verifier import SignatureVerifier

    try:
        identity = TrustedIdentity(
            issuer=issuer, subject=subject or None, subject_regexp=subject_regexp or None
        )
        verified = SignatureVerifier(trusted_root).verify_image(
            image, Path(bundle.path).read_bytes(), [identity], bundle_source=bundle.uri
        )
    except SecuremlError as err:
        raise SystemExit(f"image verification failed:\n{err.diagnostics()}") from None
    with open(verification.path, "w", encoding="utf-8") as handle:
        json.dump({"image": image, **asdict(verified)}, handle, indent=2, sort_keys=True)
    return verified.signer


def audit_report(
    audit_dir: str,
    report_md: dsl.Output[dsl.Markdown],
    report_html: dsl.Output[dsl.HTML],
    metrics: dsl.Output[dsl.Metrics],
    title: str = "secureml audit report",
    simulated_gpu: bool = False,
) -> int:
    """Render the audit records under `audit_dir` as Markdown and HTML; returns the failed-step count."""
    from secureml.components.audit_report import summarize, write_reports

    records = write_reports(
        audit_dir, report_md.path, report_html.path, title=title, simulated_gpu=simulated_gpu
    )
    failed = sum(1 for record in records if not summarize(record).passed)
    metrics.log_metric("steps", len(records))
    metrics.log_metric("failed_steps", failed)
    metrics.log_metric("violations", sum(len(r.get("violations") or []) for r in records))
    return failed


def verify_model(model: dsl.Input[dsl.Model], verification: dsl.Output[dsl.Artifact]) -> str:
    """Record the model the launcher verified before this step ran (`verify_inputs=["model"]`).

    The launcher has already checked `model`'s model-signing signature against the profile's
    trusted signers (a failure stops the step with exit 78 before this body runs); this writes
    what it found (digest, signer, files) as the `verification` artifact. Returns the digest.
    """
    import json
    import os
    from pathlib import Path

    from secureml.core import contract

    found = os.environ.get(contract.ENV_VERIFIED_INPUTS)
    if not found:
        raise SystemExit(
            "verify_model runs under the secureml launcher with verify_inputs=['model']: "
            "compile the pipeline with `secureml compile` (or run it with `secureml run --local`)"
        )
    (entry,) = [
        e for e in json.loads(Path(found).read_text(encoding="utf-8")) if e["input"] == "model"
    ]
    with open(verification.path, "w", encoding="utf-8") as handle:
        json.dump(entry, handle, indent=2, sort_keys=True)
    return str(entry["digest"])
