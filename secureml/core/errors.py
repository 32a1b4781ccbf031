"""One error type for everything a person can fix: `SecuremlError` says what, why and the fix."""

from __future__ import annotations


class SecuremlError(Exception):
    """A failure a user can act on: what went wrong, why, and what to do.

    `exit_code` is the CLI's (docs/cli.md): 2, unusable input or environment, unless the error is
    a checked answer of no (rule violations, a signature that does not verify, a refused object),
    which its class marks 1.
    """

    exit_code: int = 2

    def __init__(self, what: str, *, why: str = "", fix: str = "", where: str = "") -> None:
        self.what = what
        self.why = why
        self.fix = fix
        self.where = where
        super().__init__(self.diagnostics())

    def diagnostics(self) -> str:
        head = f"{self.where}: {self.what}" if self.where else self.what
        lines = [head]
        if self.why:
            lines.append(f"  why: {self.why}")
        if self.fix:
            lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)


class InputError(SecuremlError):
    """A file or argument could not be used at all (unreadable, not YAML, wrong kind)."""

    exit_code = 2


class ProfileError(SecuremlError):
    """A TenantProfile is invalid; `problems` lists every `(yaml.path, message)` found. An input no
    command can use, so exit 2 everywhere."""

    exit_code = 2

    def __init__(
        self,
        source: str,
        problems: list[tuple[str, str]],
        locations: dict[str, tuple[int, int]] | None = None,
    ) -> None:
        self.source = source
        self.problems = problems
        self.locations = locations or {}
        listing = "\n".join(
            f"  {self.where_of(path)}: {path}: {message}" for path, message in problems
        )
        super().__init__(
            f"{source}: invalid TenantProfile ({len(problems)} problem(s))\n{listing}",
            fix="correct the fields named above; `secureml profile schema` prints every field",
        )

    def where_of(self, path: str) -> str:
        """`file:line:column` of the field at `path` when known, else the file."""
        found = self.locations.get(path)
        return f"{self.source}:{found[0]}:{found[1]}" if found else self.source

    def diagnostics(self) -> str:
        return self.what + (f"\n  fix: {self.fix}" if self.fix else "")


class ClusterError(SecuremlError):
    """The cluster could not be used: kubeconfig unusable, API server unreachable or missing an API."""

    exit_code = 2


class NetworkError(SecuremlError):
    """A service the command needs did not answer (an image registry, a TUF repository): the
    environment is unusable, which says nothing about the input, so exit 2 and not a violation."""

    exit_code = 2
