"""Sigstore verification cost: verifications per second with a warm verifier (vs building a verifier
for every check), and what verifying 50 distinct images adds to `secureml compile`.

Real public-good bundles (../shared/fixtures/sigstore) measure the per-verification cost; the
50-image compile uses cosign v3 bundles signed by the test Sigstore instance of the test suite
(tests/support/private_sigstore.py), verified by the same sigstore-python verifier. Ratios, one run.
"""

import hashlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CONFORMANCE = REPO.parent / "shared" / "fixtures" / "sigstore" / "conformance"
BEACON = (
    "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/"
    ".github/workflows/extremely-dangerous-oidc-beacon.yml@refs/heads/main"
)
GH = "https://token.actions.githubusercontent.com"
STEPS = 50


def per_second(fn, seconds: float = 1.5) -> float:
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        count += 1
    return count / (time.perf_counter() - start)


def bench_throughput() -> None:
    from secureml.supplychain import trust
    from secureml.supplychain.identity import TrustedIdentity
    from secureml.supplychain.verifier import SignatureVerifier

    bundle = (CONFORMANCE / "happy-path-v0.3-new-mediaType" / "bundle.sigstore.json").read_bytes()
    artifact = (CONFORMANCE / "a.txt").read_bytes()
    image = "ghcr.io/acme/train@sha256:" + hashlib.sha256(artifact).hexdigest()
    who = [TrustedIdentity(issuer=GH, subject=BEACON)]
    warm = SignatureVerifier("production")

    def cold() -> None:
        trust._cached_verifier.cache_clear()
        SignatureVerifier("production").verify_image(image, bundle, who)

    warm_rate = per_second(lambda: warm.verify_image(image, bundle, who))
    cold_rate = per_second(cold)
    print(
        f"warm verifier: {warm_rate:8.1f} verifications/s (real public-good bundle, message signature)"
    )
    print(f"cold verifier: {cold_rate:8.1f} verifications/s (trusted root loaded each time)")
    print(f"ratio warm/cold: {warm_rate / cold_rate:.2f}x")


def bench_compile() -> None:
    import yaml
    from kfp import dsl

    from secureml import secure_component
    from secureml.compile.compiler import compile_pipeline
    from secureml.profile.model import TenantProfile
    from secureml.supplychain.compile import verify_images_for_compile
    from secureml.supplychain.image_bundles import bundle_filename
    from tests.support.private_sigstore import PrivateSigstore

    pki = PrivateSigstore()
    work = Path(tempfile.mkdtemp(prefix="secureml-bench-"))
    root = pki.write_trusted_root(work / "trusted_root.json")
    data = yaml.safe_load((REPO / "profiles" / "team-a.yaml").read_text())
    data["spec"]["images"]["signatures"] = {
        "required": True,
        "trustedRoot": str(root),
        "identities": [{"issuer": GH, "subjectRegExp": r"^https://github\.com/acme/"}],
    }
    profile = TenantProfile.from_dict(data, source="bench")
    images = []
    for i in range(STEPS):
        digest = hashlib.sha256(f"image-{i}".encode()).hexdigest()
        images.append(f"ghcr.io/acme/step{i}@sha256:{digest}")
        (work / bundle_filename(digest)).write_bytes(
            pki.sign_image(
                f"ghcr.io/acme/step{i}",
                digest,
                subject="https://github.com/acme/images/.github/workflows/b.yml@refs/heads/main",
                issuer=GH,
            )
        )

    components = []
    for i, image in enumerate(images):

        def step(x: int) -> int:
            return x + 1

        step.__name__ = f"step_{i}"
        components.append(secure_component(step, image=image))

    @dsl.pipeline(name="bench-50-images")
    def chain(x: int = 0):
        value = x
        for component in components:
            value = component(x=value).output

    def verifier(steps):
        results = verify_images_for_compile(steps, profile, work)
        assert all(r.verified for r in results), [r.message for r in results if not r.verified]
        return results

    def plain() -> float:
        start = time.perf_counter()
        compile_pipeline(chain, profile)
        return time.perf_counter() - start

    def verified() -> float:
        start = time.perf_counter()
        compiled = compile_pipeline(chain, profile, image_verifier=verifier)
        elapsed = time.perf_counter() - start
        assert all(step.signature for step in compiled.steps)
        return elapsed

    plain(), verified()  # warm up imports and the verifier cache
    runs = 3
    alone = statistics.median(
        _timed(lambda: verifier([(f"s{i}", image) for i, image in enumerate(images)]))
        for _ in range(runs)
    )
    print(
        f"verify_images_for_compile alone, {STEPS} images: {alone * 1000:8.1f} ms ({alone / STEPS * 1000:.2f} ms per image)"
    )
    base = statistics.median(plain() for _ in range(runs))
    signed = statistics.median(verified() for _ in range(runs))
    print(f"compile, {STEPS} steps, no signature checks: {base * 1000:8.1f} ms (median of {runs})")
    print(
        f"compile, {STEPS} distinct images verified:    {signed * 1000:8.1f} ms (median of {runs})"
    )
    print(
        f"ratio verified/plain: {signed / base:.2f}x; {(signed - base) / STEPS * 1000:.2f} ms per image"
    )


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    if not CONFORMANCE.is_dir():
        print(f"skipped: Sigstore fixtures not found at {CONFORMANCE}")
        return 0
    bench_throughput()
    bench_compile()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
