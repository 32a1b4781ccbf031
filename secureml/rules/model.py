"""The small value of the rule catalogue: a `Rule` (what it reports is `secureml.core.violation.Violation`)."""

from __future__ import annotations

from dataclasses import dataclass, field

LEVEL_BASELINE = "baseline"
LEVEL_RESTRICTED = "restricted"
LEVELS = (LEVEL_BASELINE, LEVEL_RESTRICTED)


@dataclass(frozen=True, slots=True)
class Rule:
    """One admission rule, written once and used by the ValidatingAdmissionPolicy and offline.

    `expression` is CEL over `object` (the Pod) that is true when the pod is allowed, exactly as a
    ValidatingAdmissionPolicy `validations[].expression`; `message_expression` is its
    `messageExpression` (a CEL string naming the offending container); `message` the static
    fallback. `applies_to` names where the rule is in force: `level:baseline`, `level:restricted`
    or `profile:<tenant>`. `scope` is CEL over `object` that is true for the pods the rule is in
    force for, "" for every pod (`secureml.rules.scope`); the renderer makes it the
    `matchConditions` entry of the policy that holds the rule.
    """

    id: str
    message: str
    expression: str
    message_expression: str
    applies_to: tuple[str, ...]
    scope: str = ""
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The engine's caches are keyed by tuples of rules, hashed once per judged pod: the hash
        # of a rule's fields is computed once, not at every lookup.
        key = (self.id, self.message, self.expression, self.message_expression)
        object.__setattr__(self, "_hash", hash((*key, self.applies_to, self.scope)))

    def __hash__(self) -> int:
        return self._hash
