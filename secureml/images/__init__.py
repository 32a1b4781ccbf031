"""Step images and the platform runtime image: build context, builders, OCI reading, checks."""
