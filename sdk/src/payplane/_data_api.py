"""The Data API client (protocol.md section 7): signed requests, verified answers, polite pacing.

Every request is a POST of a JSON object carrying ``token`` and a ``signature`` made with the
token's secret key; every success answer carries a ``signature`` made with the same key, which is
checked before any of its data is returned. The client keeps each token under the platform's
rate (at most 60 requests in any 61 seconds: one second of margin for network jitter), and on a
429 waits ``max(3 s, Retry-After)`` before trying again, a bounded number of times.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from http import HTTPStatus
from typing import Any, Callable, Union

from ._exceptions import DataApiError, InvalidParameter, InvalidSignature, UnexpectedResponse
from ._http import HttpClient, Response, check_base_url, load_json_object, tls_context
from ._signature import SigningKey, _decode_signature

__all__ = ["DEFAULT_DATA_API_URL", "DataApi"]

#: ``{data_api_base}`` of one Payplane process by default; it already ends with ``/v1``.
DEFAULT_DATA_API_URL = "https://127.0.0.1:8443/v1"

#: Answers larger than this are refused (a page of 1000 operations is well below it).
MAX_RESPONSE_BYTES = 64 * 1024 * 1024

Clock = Callable[[], float]
Sleep = Callable[[float], None]
DateLike = Union[datetime, str]


class _Pacer:
    """At most ``limit`` request starts in any ``window`` seconds, shared by one token's clients."""

    def __init__(self, limit: int, window: float, clock: Clock, sleep: Sleep) -> None:
        self._limit = limit
        self._window = window
        self._clock = clock
        self._sleep = sleep
        self._starts: deque[float] = deque()
        self._hold_until = float("-inf")
        self._lock = threading.Lock()

    def acquire(self) -> None:
        """Wait until one more request may start, and count it."""
        while True:
            with self._lock:
                now = self._clock()
                while self._starts and self._starts[0] <= now - self._window:
                    self._starts.popleft()
                wait = self._hold_until - now
                if len(self._starts) >= self._limit:
                    wait = max(wait, self._starts[0] + self._window - now)
                if wait <= 0:
                    self._starts.append(now)
                    return
            self._sleep(wait)

    def hold(self, seconds: float) -> None:
        """Let no request of this token start for ``seconds`` (after a 429)."""
        with self._lock:
            self._hold_until = max(self._hold_until, self._clock() + seconds)


_PACERS: dict[tuple[str, Clock, Sleep, int, float], _Pacer] = {}
_PACERS_LOCK = threading.Lock()


def _pacer_for(token: str, clock: Clock, sleep: Sleep, limit: int, window: float) -> _Pacer:
    # Keyed by a hash of the token, so that every client of one token in this process shares
    # one budget without this registry keeping the token itself.
    key = (hashlib.sha256(token.encode("utf-8")).hexdigest(), clock, sleep, limit, window)
    with _PACERS_LOCK:
        pacer = _PACERS.get(key)
        if pacer is None:
            pacer = _PACERS[key] = _Pacer(limit, window, clock, sleep)
        return pacer


def _retry_after(headers: dict[str, str], now: Callable[[], datetime]) -> float:
    """Seconds asked for by a ``Retry-After`` header (seconds or an HTTP date), else 0."""
    value = headers.get("retry-after", "").strip()
    if not value:
        return 0.0
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return 0.0
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - now()).total_seconds())


def _date(value: DateLike, name: str) -> str:
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, str):
        return value
    raise InvalidParameter(f"{name} must be a datetime or 'YYYY-MM-DD hh:mm:ss' text")


class DataApi:
    """A client of the Data API for one token.

    ``base_url`` is ``{data_api_base}``, which already ends with ``/v1``; endpoint paths start
    with ``v1`` too, so requests go to ``{base_url}/v1/balance/get`` and so on. ``ca_file``
    names extra certificate authorities to trust (a self-hosted platform's own CA).

    Requests may legitimately take minutes: ``timeout`` (seconds without any data on the
    socket) defaults to six minutes. ``max_retries`` bounds the retries after a 429, and a 429
    that asks for a wait longer than ``max_retry_wait`` seconds is raised at once.
    ``clock`` (monotonic seconds) and ``sleep`` are injectable so that tests need not wait.
    """

    def __init__(
        self,
        token: str,
        secret: str,
        base_url: str = DEFAULT_DATA_API_URL,
        ca_file: str | None = None,
        *,
        timeout: float = 360.0,
        max_retries: int = 3,
        max_retry_wait: float = 300.0,
        requests_per_window: int = 60,
        window_seconds: float = 61.0,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
    ) -> None:
        if not isinstance(token, str) or not token:
            raise InvalidParameter("the token must be non-empty text")
        if not isinstance(secret, str):
            raise InvalidParameter(f"the secret must be a string, not {type(secret).__name__}")
        self.base_url = check_base_url(base_url, "base_url")
        self._token = token
        self._key = SigningKey(secret)
        context = tls_context(ca_file) if self.base_url.startswith("https://") else None
        self._http = HttpClient(timeout=timeout, max_body_bytes=MAX_RESPONSE_BYTES, context=context)
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self._pacer = _pacer_for(token, clock, sleep, requests_per_window, window_seconds)

    def __repr__(self) -> str:
        return f"DataApi(token='{self._token[:4]}…', base_url={self.base_url!r})"

    def request(self, endpoint: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """POST a signed request to ``{base_url}/{endpoint}`` and return the verified answer.

        ``endpoint`` is an endpoint path such as ``"v1/balance/get"``. The answer's
        ``signature`` is removed from the returned dict. Raises ``DataApiError`` for an error
        envelope, ``InvalidSignature`` if the answer's signature is missing or wrong,
        ``ServiceUnreachable`` and ``UnexpectedResponse`` for transport problems.
        """
        body: dict[str, Any] = dict(params or {})
        body.pop("signature", None)
        body["token"] = self._token
        body["signature"] = self._key.sign(body)
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
        url = f"{self.base_url}/{endpoint.lstrip('/')}"
        attempt = 0
        while True:
            self._pacer.acquire()
            response = self._http.request(
                "POST", url, payload, {"Content-Type": "application/json; charset=utf-8"}
            )
            if response.status != 429 or attempt >= self.max_retries:
                break
            wait = max(3.0, _retry_after(response.headers, _utcnow))
            if wait > self.max_retry_wait:
                break
            self._pacer.hold(wait)
            attempt += 1
        if response.status != 200:
            raise _error(response)
        return self._verified(response)

    def _verified(self, response: Response) -> dict[str, Any]:
        try:
            data = load_json_object(response.body)
        except ValueError as exc:
            raise UnexpectedResponse(response.url, response.status, str(exc)) from exc
        signature = data.get("signature")
        if signature is None:
            raise InvalidSignature(f"the answer of {response.url} carries no signature")
        if _decode_signature(signature) is None:
            raise InvalidSignature(
                f"the answer of {response.url} has a signature that is not Base64 of a "
                "64-byte HMAC-SHA512 digest"
            )
        try:
            genuine = self._key.verify(data, signature)
        except InvalidParameter as exc:
            raise UnexpectedResponse(response.url, response.status, str(exc)) from exc
        if not genuine:
            raise InvalidSignature(f"the answer of {response.url} is not signed by this token")
        del data["signature"]
        return data

    def balance(self) -> list[dict[str, str]]:
        """``v1/balance/get``: one entry per project balance, e.g.
        ``{"name": "Shop_balance_USD", "USD": "100500"}`` (amounts in minor units, as text).
        """
        balance = self.request("v1/balance/get").get("balance")
        if not isinstance(balance, list):
            raise UnexpectedResponse(self.base_url + "/v1/balance/get", 200, "no balance list")
        return balance

    def operations(
        self,
        date_from: DateLike,
        date_to: DateLike,
        *,
        time_zone: str | None = None,
        project_ids: Sequence[int] | None = None,
        operation_types: Sequence[str] | None = None,
        statuses: Sequence[str] | None = None,
        fields: Sequence[str] | None = None,
        page_size: int = 1000,
    ) -> Iterator[dict[str, Any]]:
        """``v1/operations/get``: every operation in the interval, page after page.

        A generator: it asks for the next page (``limit`` = ``page_size``, growing ``offset``)
        only when the previous one is used up, until ``total`` operations have been seen.
        Dates are ``YYYY-MM-DD hh:mm:ss`` in ``time_zone`` (default UTC on the platform).
        """
        if not 1 <= page_size <= 1000:
            raise InvalidParameter("page_size must be between 1 and 1000")
        params: dict[str, Any] = {
            "interval": {"from": _date(date_from, "date_from"), "to": _date(date_to, "date_to")}
        }
        optional: dict[str, Any] = {
            "time_zone": time_zone,
            "project_ids": None if project_ids is None else list(project_ids),
            "operation_types": None if operation_types is None else list(operation_types),
            "statuses": None if statuses is None else list(statuses),
            "fields": None if fields is None else list(fields),
        }
        params.update({name: value for name, value in optional.items() if value is not None})
        offset = 0
        while True:
            page = self.request(
                "v1/operations/get", {**params, "limit": page_size, "offset": offset}
            )
            operations = page.get("operations")
            total = page.get("total")
            if not isinstance(operations, list) or not isinstance(total, int):
                raise UnexpectedResponse(
                    self.base_url + "/v1/operations/get", 200, "no operations list and total"
                )
            yield from operations
            offset += len(operations)
            if not operations or offset >= total:
                return

    def operations_by_payment(self, project_id: int, payment_id: str) -> list[dict[str, Any]]:
        """``v1/operations/get-by-payment``: all operations of one payment."""
        answer = self.request(
            "v1/operations/get-by-payment", {"project_id": project_id, "payment_id": payment_id}
        )
        operations = answer.get("operations")
        if not isinstance(operations, list):
            raise UnexpectedResponse(
                self.base_url + "/v1/operations/get-by-payment", 200, "no operations list"
            )
        return operations


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _error(response: Response) -> DataApiError | UnexpectedResponse:
    """The error envelope as a ``DataApiError``; anything else as ``UnexpectedResponse``."""
    try:
        data = load_json_object(response.body)
    except ValueError:
        data = {}
    name = data.get("name")
    message = data.get("message")
    if isinstance(name, str) and isinstance(message, str):
        return DataApiError(response.status, name, message)
    if response.status >= 400:
        return DataApiError(response.status, _reason(response.status), response.text())
    return UnexpectedResponse(response.url, response.status, response.text())


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"
