"""Properties of the signature, and the variants of protocol.md section 1.1 rebuilt here.

The reference signers below are written from the protocol's text, independently of the
library: they share no code with ``payplane._signature``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import random
import re
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

import payplane
from payplane import InvalidParameter, sign, signing_string, verify

SECRET = "s3cr3t-ключ"
PROPERTY_EXAMPLES = 200

# --- independent reference signers ------------------------------------------------------------

Leaf = tuple[str, str]


def ref_text(value: Any) -> str:
    if value is True:
        return "1"
    if value is False:
        return "0"
    if value is None:
        return ""
    return str(value)


def ref_flatten(value: Any, double: bool, path: list[str] | None = None) -> list[Leaf]:
    """Section 1 step 2: ``path:value`` items; ``double`` doubles ':' inside keys."""
    path = path or []
    out: list[Leaf] = []
    if isinstance(value, dict):
        for key, child in value.items():
            if key in ("signature", "frame_mode"):
                continue
            segment = key.replace(":", "::") if double else key
            out += ref_flatten(child, double, [*path, segment])
    elif isinstance(value, list):
        for index, child in enumerate(value):
            out += ref_flatten(child, double, [*path, str(index)])
    else:
        out.append((":".join(path), ref_text(value)))
    return out


def ref_natural_key(text: str) -> list[Any]:
    """PHP's natural order: runs of digits compare as numbers."""
    return [int(run) if run.isdigit() else run for run in re.split(r"(\d+)", text)]


def ref_js_enumeration(keys: list[str]) -> list[str]:
    """JS objects enumerate integer-like keys first (ascending), then the rest as inserted."""

    def is_index(key: str) -> bool:
        return key.isascii() and key.isdigit() and str(int(key)) == key and int(key) < 2**32 - 1

    return sorted(filter(is_index, keys), key=int) + [k for k in keys if not is_index(k)]


def ref_per_level(value: Any, prefix: str = "", js_objects: bool = True) -> list[Leaf]:
    """The JS library: keys sorted at each level by UTF-16 code units, no ':' doubling.

    It copies the sorted keys into a new object and walks that, so integer-like keys (array
    indices too) come first in numeric order (``js_objects``); without that quirk, indices
    sort as text.
    """
    out: list[Leaf] = []
    if isinstance(value, (dict, list)):
        if isinstance(value, dict):
            keys = [k for k in value if k not in ("signature", "frame_mode")]
        else:
            keys = [str(i) for i in range(len(value))]
        keys.sort(key=lambda k: k.encode("utf-16-be"))
        if js_objects:
            keys = ref_js_enumeration(keys)
        for key in keys:
            child = value[key] if isinstance(value, dict) else value[int(key)]
            out += ref_per_level(child, f"{prefix}:{key}" if prefix else key, js_objects)
    else:
        out.append((prefix, ref_text(value)))
    return out


def ref_join(items: list[Leaf]) -> str:
    return ";".join(f"{key}:{text}" for key, text in items)


def ref_sign_string(message: str, secret: str = SECRET) -> str:
    digest = hmac.new(secret.encode(), message.encode(), hashlib.sha512).digest()
    return base64.b64encode(digest).decode()


def ref_canonical(payload: dict[str, Any]) -> str:
    return ref_join(sorted(ref_flatten(payload, True)))


def ref_variants(payload: dict[str, Any]) -> dict[str, str]:
    """Every variant of section 1.1, by name."""
    variants = {"canonical": ref_canonical(payload)}
    for double in (True, False):
        items = ref_flatten(payload, double)
        tag = "doubled" if double else "undoubled"
        variants[f"php-natural-{tag}"] = ref_join(
            sorted(items, key=lambda item: ref_natural_key(item[0]))
        )
        variants[f"go-java-whole-item-{tag}"] = ref_join(
            sorted(items, key=lambda item: f"{item[0]}:{item[1]}")
        )
    variants["js-per-level"] = ref_join(ref_per_level(payload))
    variants["js-per-level-text-order"] = ref_join(ref_per_level(payload, js_objects=False))
    return variants


# --- generated payloads -----------------------------------------------------------------------

# Keys deliberately include the corners: ':' inside keys, digits, '-' and '.' (below ':'), so
# that sibling-prefix cases and natural-order cases occur.
keys = st.text(alphabet="ab:0129-._xé", min_size=1, max_size=5).filter(
    lambda key: key not in ("signature", "frame_mode")
)
scalars = st.one_of(
    st.text(max_size=8),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.booleans(),
    st.none(),
)
trees = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=4),
        # arrays longer than ten: string order of indices differs from numeric order
        st.lists(scalars, min_size=11, max_size=12),
    ),
    max_leaves=10,
)
payloads = st.dictionaries(keys, trees, min_size=1, max_size=6)


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same tree with every object's members in another insertion order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {key: shuffled(child, rng) for key, child in items}
    if isinstance(value, list):
        return [shuffled(child, rng) for child in value]
    return value


def leaf_paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in leaf_paths(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in leaf_paths(v, (*path, i))]
    return [path]


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: replaced(v, rest, new) if k == head else v for k, v in value.items()}
    return [replaced(v, rest, new) if i == head else v for i, v in enumerate(value)]


# --- properties -------------------------------------------------------------------------------


@settings(deadline=None, max_examples=PROPERTY_EXAMPLES)
@given(payloads, st.integers(0, 2**32))
def test_insertion_order_never_changes_a_signature(payload: dict[str, Any], seed: int) -> None:
    assert sign(shuffled(payload, random.Random(seed)), SECRET) == sign(payload, SECRET)


@settings(deadline=None, max_examples=PROPERTY_EXAMPLES)
@given(payloads)
def test_the_library_signs_what_the_reference_canonical_signer_signs(
    payload: dict[str, Any],
) -> None:
    # Equal flattened keys (only possible through a doubled ':') are ordered by value too.
    assert signing_string(payload) == ref_canonical(payload)
    assert sign(payload, SECRET) == ref_sign_string(ref_canonical(payload))


@settings(deadline=None, max_examples=PROPERTY_EXAMPLES)
@given(payloads, st.data())
def test_changing_any_value_changes_the_signature(payload: dict[str, Any], data: Any) -> None:
    paths = leaf_paths(payload)
    assume(paths)
    path = data.draw(st.sampled_from(paths))
    old = payload
    for step in path:
        old = old[step]
    new = ref_text(old) + data.draw(st.text(min_size=1, max_size=3))
    assert sign(replaced(payload, path, new), SECRET) != sign(payload, SECRET)


@settings(deadline=None, max_examples=PROPERTY_EXAMPLES)
@given(payloads, st.data())
def test_changing_any_key_changes_the_signature(payload: dict[str, Any], data: Any) -> None:
    # Rename a top-level member that contributes at least one item to another fresh name.
    contributing = [key for key, value in payload.items() if ref_flatten({key: value}, True)]
    assume(contributing)
    key = data.draw(st.sampled_from(contributing))
    new_key = data.draw(keys.filter(lambda k: k not in payload))
    renamed = {(new_key if k == key else k): v for k, v in payload.items()}
    assert sign(renamed, SECRET) != sign(payload, SECRET)


@settings(deadline=None, max_examples=100)
@given(payloads)
def test_every_variant_of_section_1_1_verifies(payload: dict[str, Any]) -> None:
    for name, message in ref_variants(payload).items():
        assert verify(payload, ref_sign_string(message), SECRET), name


@settings(deadline=None, max_examples=200)
@given(payloads)
def test_no_variant_verifies_under_another_secret(payload: dict[str, Any]) -> None:
    for message in ref_variants(payload).values():
        assert not verify(payload, ref_sign_string(message, SECRET + "!"), SECRET)


flat_typed = st.dictionaries(
    st.sampled_from(["redirect", "close_on_missclick", "description", "amount", "id", "x"]),
    st.one_of(st.booleans(), st.none(), st.integers(0, 10**6), st.text("abc-", max_size=4)),
    min_size=1,
)


@settings(deadline=None, max_examples=200)
@given(flat_typed, st.sampled_from(["go-js", "python-dotnet", "php"]))
def test_url_query_text_of_booleans_and_nulls_verifies(payload: dict[str, Any], style: str) -> None:
    # The libraries sign typed values (booleans 1/0, null empty) but write text into URLs.
    signature = ref_sign_string(ref_canonical(payload))
    as_text = {
        "go-js": {True: "true", False: "false", None: "null"},
        "python-dotnet": {True: "True", False: "False", None: "None"},
        "php": {True: "1", False: "0", None: ""},
    }[style]
    query = {}
    for key, value in payload.items():
        if isinstance(value, bool) or value is None:
            query[key] = as_text[value]
        else:
            query[key] = str(value)
    assert verify(query, signature, SECRET)


def test_frame_mode_and_signature_are_never_signed_at_any_depth() -> None:
    base = {"a": {"b": 1, "frame_mode": "popup", "signature": "x"}, "frame_mode": "iframe"}
    assert signing_string(base) == "a:b:1"


def test_booleans_nulls_and_empty_containers_render_as_documented() -> None:
    payload = {"t": True, "f": False, "n": None, "e": [], "o": {}, "l": [1, {"k": "v"}]}
    assert signing_string(payload) == "f:0;l:0:1;l:1:k:v;n:;t:1"


def test_a_colon_inside_a_key_is_doubled() -> None:
    assert signing_string({"a:b": {"c": 1}}) == "a::b:c:1"


def test_verify_refuses_a_signature_that_is_not_base64_of_64_bytes() -> None:
    payload = {"a": 1}
    good = sign(payload, SECRET)
    for bad in (None, 42, "", good[:-2], good + "==", "!" * 88, good.encode()):
        assert not verify(payload, bad, SECRET)
    assert not payplane.is_base64_signature(base64.b64encode(b"x" * 63).decode())


@settings(deadline=None, max_examples=200)
@given(st.binary(max_size=300), st.binary(max_size=200))
def test_the_prepared_hmac_key_equals_the_standard_library_hmac(key: bytes, message: bytes) -> None:
    from payplane._signature import SigningKey

    assert SigningKey(key).digest(message) == hmac.digest(key, message, "sha512")


def test_nesting_32_levels_signs_and_33_is_refused() -> None:
    def nested(levels: int) -> dict[str, Any]:
        node: dict[str, Any] = {"leaf": 1}
        for _ in range(levels - 1):
            node = {"n": node}
        return node

    assert signing_string(nested(32)).endswith(":leaf:1")
    try:
        sign(nested(33), SECRET)
    except InvalidParameter as exc:
        assert "deeper than 32" in str(exc)
    else:
        raise AssertionError("33 levels were signed")


def test_unsignable_input_raises_the_library_error_naming_the_problem() -> None:
    cases = [
        ({1: "a"}, "not a string"),
        ({"a": {2: "b"}}, "not a string"),
        ({"a": object()}, "type object"),
        ({"a": float("nan")}, "non-finite"),
        ({"a": "\ud800"}, "not valid Unicode"),
    ]
    for payload, words in cases:
        try:
            sign(payload, SECRET)
        except InvalidParameter as exc:
            assert words in str(exc), (payload, exc)
        else:
            raise AssertionError(f"{payload!r} was signed")


def test_the_corners_that_leave_the_fast_path_still_sign_canonically() -> None:
    from collections import OrderedDict
    from types import MappingProxyType

    class Key(str):
        pass

    cases: list[Any] = [
        {"a": {"x": 1}, "a-b": 2, "a.c": {"y": 3}},  # sibling prefix, followed below ':'
        {"a": {"x": 1}, "ab": 2},  # sibling prefix, followed above ':'
        {"l": [{"v": i} for i in range(12)]},  # long list of containers
        {"l": list(range(12))},  # long list of scalars: indices in text order
        {"l": [[], {}, [1], {"k": None}] * 3},
        {"a:b": {"c": 1}, "a": {"b": {"c": 0}}},  # doubled ':' with equal paths
        {Key("k"): 1, "j": (1, 2)},
        OrderedDict([("b", 1), ("a", MappingProxyType({"c": 2}))]),
        {"s": {"signature": "x", "frame_mode": "y", "z": 1}, "frame_mode": 2},
        {"n": None, "f": 1.5, "i": 10**20, "t": True},
    ]

    def plain(value: Any) -> Any:
        if isinstance(value, (dict, MappingProxyType)):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value

    for payload in cases:
        assert signing_string(payload) == ref_canonical(plain(payload)), payload
