"""The JSON Schema (draft 2020-12) of a spec for the installed registry: what ``blockspec schema`` writes.

Derived, never written by hand: the tables and their order from the spec layer (``convert.py``'s
``TOP_LEVEL``, ``kinds.py``), each table's fields from its attrs class (``spec/config_schema.py``),
and each kind's components from the registry. A ``use`` picks the branch: one ``if``/``then`` per
component, so a misspelt field of the chosen component is caught. Like ``config_schema``, it says
what the reader accepts or less, never more: the reader stays the judge of what relates fields.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from blockspec.outputs.kinds import file_kind
from blockspec.registry.components import Component, Registry
from blockspec.spec.config_schema import class_doc, config_schema, merged
from blockspec.spec.convert import LAYERS, MODEL_WIDE, SELECTOR_MINIMUM, SELECTORS, default_uses
from blockspec.spec.kinds import KIND_SUMMARIES, SECTIONS, WRAPPER_SECTIONS
from blockspec.spec.schema import LAYER_KINDS, InitConfig, ModelConfig

DRAFT = "https://json-schema.org/draft/2020-12/schema"
TITLE = "blockspec spec"
USE = "use"
TARGETS = "targets"  # what an [[adapters]] entry wraps
# What --force may replace: a schema file this module wrote (its title is in its first lines, as schema_text puts it).
SCHEMA_FILE = file_kind("a blockspec spec schema", signatures=(b"{",), contains=f'"title": "{TITLE}"'.encode())


def spec_schema(registry: Registry, *, documents: Iterable[type] = ()) -> dict[str, Any]:
    """The schema of a spec file; each attrs class in ``documents`` adds its fields as optional top-level tables
    (a checkpoint's spec.toml holds its [lock] too)."""
    defaults = default_uses()
    properties: dict[str, Any] = {"model": _described(config_schema(ModelConfig), ModelConfig)}
    properties |= {kind: {"$ref": f"#/$defs/{kind}"} for kind in SECTIONS}
    properties["init"] = _described(config_schema(InitConfig), InitConfig)
    properties[LAYERS] = {"type": "array", "items": {"$ref": "#/$defs/layer"},
                          "description": "per-layer overrides, applied in order to the layers each entry selects"}
    properties |= {section: {"type": "array", "items": {"$ref": f"#/$defs/{kind}"},
                             "description": f"{KIND_SUMMARIES[kind]}; applied in order after the model is built"}
                   for kind, section in WRAPPER_SECTIONS.items()}
    for document in documents:
        properties |= config_schema(document)["properties"]
    required = ["model", *(kind for kind in SECTIONS if kind not in defaults)]
    return {
        "$schema": DRAFT,
        "title": TITLE,
        "description": _installed(registry),
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
        "$defs": _definitions(registry, defaults),
    }


def _definitions(registry: Registry, defaults: dict[str, str]) -> dict[str, Any]:
    """Each kind's table, each [[layers]] table of a kind, each component's fields, and the [[layers]] entry."""
    definitions: dict[str, Any] = {}
    for kind in (*SECTIONS, *WRAPPER_SECTIONS):
        components = [c for c in registry if c.kind == kind]
        definitions[kind] = _kind_table(kind, components, registry, defaults.get(kind))
        definitions |= {_component_ref(c): _component_fields(c) for c in components}
    definitions |= {f"layer.{kind}": _layer_table(kind, [c for c in registry if c.kind == kind], registry)
                    for kind in LAYER_KINDS}
    definitions["layer"] = _layer_entry()
    return definitions


def _kind_table(kind: str, components: list[Component], registry: Registry, default: str | None) -> dict[str, Any]:
    """A [kind] table: ``use`` names one of the installed components, whose fields then are the table's."""
    absent = f"; without the table: {default}" if default else "; required"
    table = {"type": "object", "description": f"{KIND_SUMMARIES[kind]}{absent}", "required": [USE],
             "properties": {USE: _use_schema(kind, components, registry)}}
    return table | _branches(components, registry)


def _layer_table(kind: str, components: list[Component], registry: Registry) -> dict[str, Any]:
    """A [[layers]] entry's table of a kind: with ``use``, that component afresh (as in [kind]); without, fields
    merged over the table the layer has so far, which may be any component of the kind's (none of it required)."""
    fields: dict[str, Any] = {}
    for component in components:
        for key, schema in config_schema(component.config_cls)["properties"].items():
            fields[key] = schema if fields.get(key, schema) == schema else {}  # two components type it differently
    without_use = {"if": {"not": {"required": [USE]}},
                   "then": {"properties": fields, "additionalProperties": False}}
    table = {"type": "object", "description": f"{kind} fields for the selected layers",
             "properties": {USE: _use_schema(kind, components, registry)}}
    branches = _branches(components, registry)
    return table | {"allOf": [without_use, *branches.get("allOf", [])]}


def _branches(components: list[Component], registry: Registry) -> dict[str, Any]:
    """One if/then per component: the ``use`` values that name it select its fields."""
    branches = [{"if": {"properties": {USE: {"enum": _uses_of(c, registry)}}, "required": [USE]},
                 "then": {"$ref": f"#/$defs/{_component_ref(c)}"}} for c in components]
    return {"allOf": branches} if branches else {}


def _component_fields(component: Component) -> dict[str, Any]:
    """A component's table: ``use`` and its config's fields, nothing else."""
    schema = config_schema(component.config_cls)
    schema["properties"] = {USE: {"type": "string"}, **schema["properties"]}
    if component.kind in WRAPPER_SECTIONS:  # an [[adapters]] entry also says what it wraps
        schema["properties"][TARGETS] = {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1},
                                         "description": "module-path patterns (* within a segment) or @kind"}
        schema["required"] = [*schema.get("required", []), TARGETS]
    return _described(schema, component.config_cls, f"{component.kind} {component.qualified_name}")


def _use_schema(kind: str, components: list[Component], registry: Registry) -> dict[str, Any]:
    uses = [use for c in components for use in _uses_of(c, registry)]
    names = ", ".join(sorted({c.name for c in components})) or "none installed"
    return {"enum": uses, "description": f"which {kind}: {names} (or distribution:name, pinned)"}


def _uses_of(component: Component, registry: Registry) -> list[str]:
    """What a spec may write to name it: "distribution:name" always, the bare name when no other provides it."""
    unambiguous = len(registry.providers(component.kind, component.name)) == 1
    return [component.name, component.qualified_name] if unambiguous else [component.qualified_name]


def _component_ref(component: Component) -> str:
    return f"{component.kind}.{component.qualified_name}"


def _layer_entry() -> dict[str, Any]:
    """One [[layers]] entry: a selector (index alone, or every/offset/from/to) and at least one table to vary."""
    index = {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": SELECTOR_MINIMUM["index"]},
             "description": "the layers this entry selects"}
    properties: dict[str, Any] = {"index": index}
    properties |= {key: {"type": "integer", "minimum": SELECTOR_MINIMUM[key]} for key in SELECTORS if key != "index"}
    properties |= {kind: {"$ref": f"#/$defs/layer.{kind}"} for kind in LAYER_KINDS}
    others = {key: False for key in SELECTORS if key != "index"}
    return {
        "type": "object", "properties": properties, "additionalProperties": False,
        "description": "overrides for the layers it selects; model-wide, never here: " + "; ".join(MODEL_WIDE.values()),
        "allOf": [{"anyOf": [{"required": [key]} for key in SELECTORS]},
                  {"anyOf": [{"required": [kind]} for kind in LAYER_KINDS]}],
        "dependentSchemas": {"index": {"properties": others}},
        "dependentRequired": {"offset": ["every"]},
    }


def _described(schema: dict[str, Any], cls: type, title: str | None = None) -> dict[str, Any]:
    doc = class_doc(cls)
    return merged(schema, {key: value for key, value in (("title", title), ("description", doc)) if value})


def _installed(registry: Registry) -> str:
    found = ", ".join(f"{name} {version}" for name, (version, _) in sorted(registry.distributions().items()))
    return f"A blockspec model spec, for the installed components of: {found}. Generated by `blockspec schema`."


def schema_text(schema: dict[str, Any]) -> str:
    """The schema as its file holds it: indented JSON, keys in the order built, non-ASCII text as itself."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
