"""Who signed: the signer of a Fulcio certificate, and the identities a tenant trusts."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sigstore.errors import VerificationError

from secureml.core.errors import InputError

if TYPE_CHECKING:
    from cryptography.x509 import Certificate

# Fulcio certificate extensions (https://github.com/sigstore/fulcio/blob/main/docs/oid-info.md).
OID_ISSUER_V1 = "1.3.6.1.4.1.57264.1.1"  # raw bytes
OID_ISSUER_V2 = "1.3.6.1.4.1.57264.1.8"  # DER UTF8String
OID_SAN_OTHERNAME = "1.3.6.1.4.1.57264.1.7"


@dataclass(frozen=True, slots=True)
class Signer:
    """The identity a signing certificate was issued to."""

    subjects: tuple[str, ...]
    issuers: tuple[str, ...]  # every issuer extension present; normally one value

    @property
    def subject(self) -> str:
        return self.subjects[0] if self.subjects else "(no subject)"

    @property
    def issuer(self) -> str:
        return (
            self.issuers[0] if len(set(self.issuers)) == 1 else " / ".join(self.issuers) or "(none)"
        )

    def __str__(self) -> str:
        return f"{self.subject} (issuer {self.issuer})"

    @classmethod
    def from_certificate(cls, cert: Certificate) -> Signer:
        from cryptography import x509
        from cryptography.hazmat import asn1

        subjects: list[str] = []
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            san = None
        if san is not None:
            subjects += san.get_values_for_type(x509.UniformResourceIdentifier)
            subjects += san.get_values_for_type(x509.RFC822Name)
            subjects += [
                other.value.decode(errors="replace")
                for other in san.get_values_for_type(x509.OtherName)
                if other.type_id.dotted_string == OID_SAN_OTHERNAME
            ]
        issuers: list[str] = []
        for ext in cert.extensions:
            raw = getattr(ext.value, "value", None)
            if not isinstance(raw, bytes):
                continue
            if ext.oid.dotted_string == OID_ISSUER_V1:
                issuers.append(raw.decode(errors="replace"))
            elif ext.oid.dotted_string == OID_ISSUER_V2:
                try:
                    issuers.append(asn1.decode_der(str, raw))
                except ValueError:
                    issuers.append("(malformed issuer extension)")
        return cls(subjects=tuple(subjects), issuers=tuple(issuers))


@dataclass(frozen=True, slots=True)
class TrustedIdentity:
    """One signer a tenant trusts: exact `subject` or `subject_regexp`, issued by `issuer`."""

    issuer: str
    subject: str | None = None
    subject_regexp: str | None = None
    _pattern: re.Pattern[str] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.issuer:
            raise InputError(
                "a trusted signer identity has no OIDC issuer",
                why="without the issuer anyone able to obtain the same subject elsewhere would pass",
                fix="give --certificate-oidc-issuer (or `issuer:` in the profile)",
            )
        if (self.subject is None) == (self.subject_regexp is None):
            raise InputError(
                "a trusted signer identity needs exactly one of subject or subject regexp",
                why=f"got subject={self.subject!r}, regexp={self.subject_regexp!r}",
                fix="give --certificate-identity or --certificate-identity-regexp, not both",
            )
        if self.subject_regexp is not None:
            try:
                object.__setattr__(self, "_pattern", re.compile(self.subject_regexp))
            except re.error as err:
                raise InputError(
                    f"signer regular expression {self.subject_regexp!r} is invalid",
                    why=str(err),
                    fix="correct the expression (Python `re` syntax)",
                ) from None

    def matching_subject(self, signer: Signer) -> str | None:
        """The signer's subject that this identity accepts, or None when it accepts none."""
        if not signer.issuers or set(signer.issuers) != {self.issuer}:
            return None
        for subject in signer.subjects:
            if (
                self._pattern.search(subject)
                if self._pattern is not None
                else subject == self.subject
            ):
                return subject
        return None

    def __str__(self) -> str:
        who = self.subject if self.subject is not None else f"~/{self.subject_regexp}/"
        return f"{who} (issuer {self.issuer})"


def identities_from_profile(profile: Any) -> list[TrustedIdentity]:
    """The `spec.images.signatures.identities` of a TenantProfile."""
    return [
        TrustedIdentity(
            issuer=ident.issuer, subject=ident.subject, subject_regexp=ident.subject_reg_exp
        )
        for ident in profile.spec.images.signatures.identities
    ]


def identities_from_flags(
    *,
    identity: str | None,
    identity_regexp: str | None,
    issuer: str | None,
    alternative: str = "",
) -> list[TrustedIdentity]:
    """The identity given with cosign-style flags (`--certificate-identity[-regexp]`,
    `--certificate-oidc-issuer`); `alternative` names the command's other way to give one (e.g.
    `--profile`), so the fix names only flags the command has."""
    if identity is None and identity_regexp is None:
        flags = (
            "--certificate-identity or --certificate-identity-regexp with --certificate-oidc-issuer"
        )
        raise InputError(
            "no trusted signer given",
            why="a signature proves nothing unless the signer is one you trust",
            fix=f"give {alternative}, or {flags}" if alternative else f"give {flags}",
        )
    if not issuer:
        raise InputError(
            "--certificate-oidc-issuer is missing",
            why="the subject alone can be claimed through another OIDC provider",
            fix="add --certificate-oidc-issuer, e.g. https://token.actions.githubusercontent.com",
        )
    return [TrustedIdentity(issuer=issuer, subject=identity, subject_regexp=identity_regexp)]


class IdentityPolicy:
    """A sigstore `VerificationPolicy`: the certificate's signer must match any trusted identity."""

    def __init__(self, identities: Iterable[TrustedIdentity]) -> None:
        self.identities = list(identities)
        self.matched: TrustedIdentity | None = None
        self.matched_subject: str | None = None

    def verify(self, cert: Certificate) -> None:
        signer = Signer.from_certificate(cert)
        for identity in self.identities:
            subject = identity.matching_subject(signer)
            if subject is not None:
                self.matched, self.matched_subject = identity, subject
                return
        raise UntrustedSignerError(signer, self.identities)


class UntrustedSignerError(VerificationError):
    """The signature is by someone the policy does not trust (a sigstore VerificationError)."""

    def __init__(self, signer: Signer, identities: list[TrustedIdentity]) -> None:
        self.signer = signer
        self.identities = identities
        trusted = "; ".join(str(i) for i in identities) or "(none configured)"
        super().__init__(
            f"signed by {signer}, which matches none of the trusted identities: {trusted}"
        )
