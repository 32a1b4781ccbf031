"""A pipeline whose later steps verify the model an earlier step signed (tests/localrun)."""

from kfp import dsl

from secureml import secure_component
from secureml.components import verify_model_op

IMAGE = "ghcr.io/acme/ml-images/prep@sha256:" + "1" * 64


@secure_component(image=IMAGE)
def publish(signing_key: str, model: dsl.Output[dsl.Model]) -> None:
    """Write a model folder and sign it with model-signing's key signer (the key is a test's)."""
    import os
    import tempfile

    import model_signing

    os.makedirs(model.path)
    with open(os.path.join(model.path, "weights.bin"), "wb") as handle:
        handle.write(bytes(range(256)) * 16)
    key = os.path.join(tempfile.mkdtemp(), "key.pem")
    with open(key, "w") as handle:
        handle.write(signing_key)
    hashing = model_signing.hashing.Config().set_ignored_paths(paths=["model.sig"])
    signing = model_signing.signing.Config().use_elliptic_key_signer(private_key=key)
    signing.set_hashing_config(hashing).sign(model.path, os.path.join(model.path, "model.sig"))


@secure_component(image=IMAGE, verify_inputs=["model"])
def load(model: dsl.Input[dsl.Model]) -> int:
    import os

    return os.path.getsize(os.path.join(model.path, "weights.bin"))


verify_model = verify_model_op(image=IMAGE)


@dsl.pipeline(name="signed-models")
def signed_models(signing_key: str) -> int:
    model = publish(signing_key=signing_key).outputs["model"]
    verify_model(model=model)
    return load(model=model).output
