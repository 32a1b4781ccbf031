"""Reading a TenantProfile's YAML: refuse duplicate keys, remember where every field was written."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

Location = tuple[int, int]  # 1-based line and column


@dataclass
class LoadedYaml:
    """The document's data, duplicate keys found, and where each path's key or item starts."""

    data: Any
    # (path of the second key, message, where the second key is)
    duplicates: list[tuple[tuple[Any, ...], str, Location]] = field(default_factory=list)
    locations: dict[tuple[Any, ...], Location] = field(default_factory=dict)


def _mark(node: yaml.Node) -> Location:
    return node.start_mark.line + 1, node.start_mark.column + 1


class _ProfileLoader(yaml.SafeLoader):
    """SafeLoader that records each mapping's duplicate keys instead of keeping the last one."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[Location, Location, Any]] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<:` merges are overridden by explicit keys on purpose
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:
                continue  # an unhashable key: SafeLoader refuses it itself
            if first is not key_node:
                self.duplicates.append((_mark(first), _mark(key_node), key))
        return super().construct_mapping(node, deep=deep)


def _walk(
    node: yaml.Node,
    path: tuple[Any, ...],
    out: dict[tuple[Any, ...], Location],
    keys: dict[Location, tuple[Any, ...]],
) -> None:
    """Fill `out` with each path's first location and `keys` with each key's path."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                child = (*path, key_node.value)
                out.setdefault(child, _mark(key_node))
                keys[_mark(key_node)] = child
                _walk(value_node, child, out, keys)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            out.setdefault((*path, index), _mark(item))
            _walk(item, (*path, index), out, keys)


def load_yaml(text: str) -> LoadedYaml:
    """Parse one YAML document; yaml.YAMLError for syntax errors, as yaml.safe_load raises."""
    loader = _ProfileLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return LoadedYaml(data=None)
        data = loader.construct_document(node)
    finally:
        loader.dispose()
    locations: dict[tuple[Any, ...], Location] = {(): _mark(node)}
    keys: dict[Location, tuple[Any, ...]] = {}
    _walk(node, (), locations, keys)
    duplicates = [
        (
            keys.get(second, (str(key),)),
            f"duplicate key {key!r}: first at line {first[0]}, again at line {second[0]}; "
            "YAML keeps only the last one silently, so a merge mistake can change a control: "
            "keep exactly one",
            second,
        )
        for first, second, key in loader.duplicates
    ]
    return LoadedYaml(data=data, duplicates=duplicates, locations=locations)
