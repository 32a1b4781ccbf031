"""Ready-made secure KFP components (preflight, scrub, image verification, audit report)."""
