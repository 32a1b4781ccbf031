"""Step images and the platform runtime image (docs/images.md).

`context` stages a build context (secureml's runtime sources, pinned wheels, the Containerfiles of
`images/`), `builders` finds and drives buildah, podman or docker, `debian` makes a base image
from Debian's mirror without a registry, `runtime` builds the images of `images/`, `userimage`
writes and builds a user's step image, `oci` reads an image from a registry or an OCI layout, and
`check` says whether an image can run a secure step.
"""
