"""Interoperability with the original platform's official libraries, run as real peers.

The Python library (PyPI ``ecommpay-sdk``, imported as ``payment_page_sdk``) runs in process;
the JS library (npm ``ecommpay``) runs in one node process fed JSON lines (see conftest).

Where their algorithms agree with the canonical one (keys without ':' and without the
sibling-prefix corner, arrays of at most ten elements, no nulls for the Python library, which
signs ``str(None)``), our signature must equal theirs. In the corners, our ``verify`` must still
accept what they produce.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from payment_page_sdk.gate import Gate as TheirGate
from payment_page_sdk.payment import Payment as TheirPayment
from payment_page_sdk.signature_handler import SignatureHandler

from payplane import Gate, sign, verify

SECRET = "peer-secret-ключ"
PEER_EXAMPLES = 300  # per test: "a few hundred generated payloads"
CORNER_EXAMPLES = 200

# Every character of these keys sorts above ':', so no sibling-prefix corner can arise.
plain_keys = st.text(alphabet="abcxyz_ABé", min_size=1, max_size=6)
# The corners: ':' inside keys, and characters below ':' after a shared prefix.
corner_keys = st.text(alphabet="ab:019-._", min_size=1, max_size=5).filter(
    lambda key: key not in ("signature", "frame_mode")
)
safe_integers = st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)


def trees(keys: st.SearchStrategy[str], nulls: bool, max_list: int) -> st.SearchStrategy[Any]:
    leaves = [st.text(max_size=10), safe_integers, st.booleans()]
    if nulls:
        leaves.append(st.none())
    return st.recursive(
        st.one_of(*leaves),
        lambda children: st.one_of(
            st.lists(children, max_size=max_list), st.dictionaries(keys, children, max_size=4)
        ),
        max_leaves=10,
    )


def payloads(keys: st.SearchStrategy[str], nulls: bool, max_list: int = 10) -> Any:
    return st.dictionaries(keys, trees(keys, nulls, max_list), min_size=1, max_size=6)


def undoubled_keys(value: Any, prefix: str = "") -> list[str]:
    """Flattened keys without ':' doubling (how the Python library names items)."""
    if isinstance(value, dict):
        return [
            k for key, child in value.items() for k in undoubled_keys(child, prefix + key + ":")
        ]
    if isinstance(value, list):
        return [k for i, child in enumerate(value) for k in undoubled_keys(child, f"{prefix}{i}:")]
    return [prefix]


def python_sign(payload: dict[str, Any]) -> str:
    return SignatureHandler(SECRET).sign(payload)


# --- signatures -------------------------------------------------------------------------------


@settings(deadline=None, max_examples=PEER_EXAMPLES)
@given(payloads(plain_keys, nulls=False))
def test_our_signature_equals_the_python_librarys(payload: dict[str, Any]) -> None:
    assert sign(payload, SECRET) == python_sign(payload)


@settings(deadline=None, max_examples=PEER_EXAMPLES)
@given(payload=payloads(plain_keys, nulls=True))
def test_our_signature_equals_the_js_librarys(node_peer: Any, payload: dict[str, Any]) -> None:
    assert sign(payload, SECRET) == node_peer.call(op="sign", payload=payload, secret=SECRET)


@settings(deadline=None, max_examples=CORNER_EXAMPLES)
@given(payload=payloads(corner_keys, nulls=True, max_list=13))
def test_we_verify_what_the_js_library_signs_even_in_the_corners(
    node_peer: Any, payload: dict[str, Any]
) -> None:
    signature = node_peer.call(op="sign", payload=payload, secret=SECRET)
    assert verify(payload, signature, SECRET)


@settings(deadline=None, max_examples=CORNER_EXAMPLES)
@given(payloads(corner_keys, nulls=False, max_list=13))
def test_we_verify_what_the_python_library_signs_even_in_the_corners(
    payload: dict[str, Any],
) -> None:
    # Without ':' doubling the Python library can give two items one name and then keeps only
    # one of them; such payloads have no well-defined signature, so they are left out.
    flattened = undoubled_keys(payload)
    assume(len(flattened) == len(set(flattened)))
    assert verify(payload, python_sign(payload), SECRET)


def test_the_corners_really_differ_from_canonical(node_peer: Any) -> None:
    # Guards the corner tests above against testing nothing: in these payloads the official
    # libraries sign another string than the canonical one, and verify still accepts them.
    sibling_prefix = {"a": {"x": 1}, "a-b": 2}
    long_array = {"l": [{"v": i} for i in range(12)]}
    colon_key = {"a:b": {"c": 1}}
    for payload in (sibling_prefix, long_array, colon_key):
        theirs = node_peer.call(op="sign", payload=payload, secret=SECRET)
        assert theirs != sign(payload, SECRET)
        assert verify(payload, theirs, SECRET)
    assert python_sign(colon_key) != sign(colon_key, SECRET)
    assert verify(colon_key, python_sign(colon_key), SECRET)


# --- callbacks --------------------------------------------------------------------------------


def callback(extra: dict[str, Any], payment_id: str) -> dict[str, Any]:
    return {
        "project_id": 402,
        "payment": {"id": payment_id, "status": "success", "sum": {"amount": 5, "currency": "EUR"}},
        "operation": {"id": 1, "type": "sale", "status": "success"},
        **extra,
    }


callback_ids = st.text(min_size=1, max_size=12)


@settings(deadline=None, max_examples=PEER_EXAMPLES)
@given(payloads(plain_keys, nulls=False), callback_ids)
def test_callbacks_the_python_library_signs_pass_handle_callback(
    extra: dict[str, Any], payment_id: str
) -> None:
    body = callback({"extra": extra}, payment_id)
    body["signature"] = python_sign(body)
    assert Gate(SECRET).handle_callback(json.dumps(body)).get_payment_id() == payment_id


@settings(deadline=None, max_examples=PEER_EXAMPLES)
@given(extra=payloads(plain_keys, nulls=True), payment_id=callback_ids)
def test_callbacks_the_js_library_signs_pass_handle_callback(
    node_peer: Any, extra: dict[str, Any], payment_id: str
) -> None:
    body = callback({"extra": extra}, payment_id)
    body["signature"] = node_peer.call(op="sign", payload=body, secret=SECRET)
    assert Gate(SECRET).handle_callback(json.dumps(body)).get_payment_id() == payment_id


@settings(deadline=None, max_examples=100)
@given(extra=payloads(plain_keys, nulls=False), payment_id=callback_ids)
def test_the_official_libraries_accept_callbacks_we_sign(
    node_peer: Any, extra: dict[str, Any], payment_id: str
) -> None:
    body = callback({"extra": extra}, payment_id)
    body["signature"] = sign(body, SECRET)
    text = json.dumps(body)
    theirs = TheirGate(SECRET).handle_callback(text)
    assert theirs.get_payment_id() == payment_id
    assert node_peer.call(op="callback", body=text, secret=SECRET) == {
        "valid": True,
        "paymentId": payment_id,
    }


# --- Payment Page URLs ------------------------------------------------------------------------

# Literal texts that the libraries also use for booleans and nulls are left out of string
# values: a URL cannot tell them apart from the typed values.
url_text = st.text(max_size=12).filter(
    lambda text: text not in ("true", "True", "false", "False", "None", "null")
)
url_names = st.text(alphabet="abcdefxyz_", min_size=1, max_size=8).filter(
    lambda name: name not in ("project_id", "payment_id", "interface_type", "best_before")
)


def url_params(nulls: bool) -> Any:
    values = [url_text, safe_integers, st.booleans()]
    if nulls:
        values.append(st.none())
    return st.dictionaries(url_names, st.one_of(*values), max_size=8)


def query_of(url: str) -> tuple[dict[str, str], str]:
    query = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True, strict_parsing=False))
    return query, query.pop("signature")


@settings(deadline=None, max_examples=PEER_EXAMPLES)
@given(url_params(nulls=True), url_text.filter(bool))
def test_urls_the_python_library_builds_verify_with_ours(
    params: dict[str, Any], payment_id: str
) -> None:
    payment = TheirPayment("402", payment_id)
    for name, value in params.items():
        setattr(payment, name, value)
    url = TheirGate(SECRET, "https://pay.example/payment").get_purchase_payment_page_url(payment)
    query, signature = query_of(url)
    if any(isinstance(value, bool) for value in params.values()):
        assert {"True", "False"} & set(query.values())
    assert verify(query, signature, SECRET)


@settings(deadline=None, max_examples=PEER_EXAMPLES)
@given(params=url_params(nulls=True), payment_id=url_text.filter(bool))
def test_urls_the_js_library_builds_verify_with_ours(
    node_peer: Any, params: dict[str, Any], payment_id: str
) -> None:
    url = node_peer.call(
        op="url",
        projectId=402,
        secret=SECRET,
        params={"payment_id": payment_id, **params},
        baseUrl="https://pay.example",
    )
    assert url.startswith("https://pay.example/payment?")
    query, signature = query_of(url)
    if any(isinstance(value, bool) for value in params.values()):
        assert {"true", "false"} & set(query.values())
    assert verify(query, signature, SECRET)


def test_a_python_library_url_with_a_boolean_and_a_null_verifies() -> None:
    # It writes True and None into the URL, signs 1 for the boolean and 'None' for the null.
    payment = TheirPayment("402", "p-1")
    payment.redirect = True
    payment.payment_description = None
    query, signature = query_of(
        TheirGate(SECRET, "https://x/payment").get_purchase_payment_page_url(payment)
    )
    assert query["redirect"] == "True" and query["payment_description"] == "None"
    assert verify(query, signature, SECRET)
