"""Supply chain: Sigstore verification of images, bundles, attestations, models and signed profiles.

Each module imports sigstore itself: import them only where verification happens.
"""
