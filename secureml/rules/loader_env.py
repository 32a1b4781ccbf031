"""No environment that makes a process load code or configuration from elsewhere."""

from __future__ import annotations

from secureml.pods.podspec import CONTAINER_LISTS
from secureml.profile.model import TenantProfile
from secureml.rules._tenant_rule import tenant_rule
from secureml.rules.cel.reference import SPEC, every_container
from secureml.rules.cel.text import quote, string_list
from secureml.rules.model import Rule
from secureml.rules.scope import EVERY_POD

LOADER_ENV = (
    "GCONV_PATH",
    "LOCPATH",
    "NLSPATH",
    "GLIBC_TUNABLES",
    "OPENSSL_CONF",
    "OPENSSL_MODULES",
    "OPENSSL_ENGINES",
)
LOADER_ENV_PREFIXES = ("LD_",)


def _name_ok() -> str:
    """CEL over the env entry `e`: not a loader variable."""
    prefixes = " || ".join(f"e.name.startsWith({quote(p)})" for p in LOADER_ENV_PREFIXES)
    return f"(!(e.name in {string_list(LOADER_ENV)}) && !({prefixes}))"


def _names_ok(var: str = "c") -> str:
    return f"(!has({var}.env) || {var}.env.all(e, {_name_ok()}))"


def _imports_ok(var: str = "c") -> str:
    """An envFrom with no prefix, or one that can form a loader name, is not ok."""
    names = string_list(LOADER_ENV)
    families = " && ".join(
        f"!s.prefix.startsWith({quote(p)}) && !{quote(p)}.startsWith(s.prefix)"
        for p in LOADER_ENV_PREFIXES
    )
    return (
        f"(!has({var}.envFrom) || {var}.envFrom.all(s, !has(s.prefix) || s.prefix == '' || "
        f"(!{names}.exists(n, n.startsWith(s.prefix)) && {families})))"
    )


def _message(predicate: str) -> str:
    """Names the first offending container and the variable (or envFrom prefix) as written."""
    why = (
        ": it makes the loader, glibc or OpenSSL load code or configuration from the step's "
        "image; remove it"
    )
    what = (
        f"(has(c.env) && c.env.exists(e, !{_name_ok()}) ? 'env ' + "
        f"c.env.filter(e, !{_name_ok()})[0].name : 'an envFrom prefix that can form a loader "
        "variable')"
    )
    per_list = " + ".join(
        f"(has({SPEC}.{lst}) ? {SPEC}.{lst}.filter(c, !{predicate}).map(c, "
        f"('container \\\"' + c.name) + ('\\\" ' + {what})) : [])"
        for lst in CONTAINER_LISTS
    )
    return f"({per_list} + ['a container sets a loader variable'])[0] + {quote(why)}"


def loader_env_rules(profile: TenantProfile) -> list[Rule]:
    """`secureml.loaderEnv` of `profile` (every pod)."""
    # A prefix-less import is `secureml.envFrom`'s to refuse (KFP's metadata import excepted,
    # whose keys the bundle's ConfigMap policy fixes): here only prefixes that can form a name.
    predicate = f"({_names_ok()} && {_imports_ok()})"
    names = ", ".join(LOADER_ENV)
    return [
        tenant_rule(
            profile,
            "secureml.loaderEnv",
            f"no container sets LD_* or {names}, nor imports env with a prefix that can form one: "
            "they make the loader, glibc or OpenSSL load code from the image",
            every_container(predicate),
            _message(predicate),
            scope=EVERY_POD,
        )
    ]
