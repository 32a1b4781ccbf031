"""The TenantProfile: the model, how it is read from YAML, and the checks on one or several."""
