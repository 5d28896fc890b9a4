"""Plain (no parser) chat derender: stop tokens, stop strings, streaming parity, logprobs."""

from __future__ import annotations

import pytest

from .helpers import (
    EOS,
    batch_chat,
    batch_view,
    chat_request,
    concat_chat,
    same_message,
    splits_of,
    stream,
)

TEXTS = [
    "Hello world. The quick brown fox jumps over the lazy dog.",
    "中文字符 and emoji 😀👍🏽👨‍👩‍👧 mixed, café naïve 日本語のテキスト END",
    "a<STOP>b STOP c \n\n stop here ### done",
]


def _ids(tok, text: str) -> list[int]:  # noqa: ANN001
    return tok.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("kind", ["one", "whole", "random"])
@pytest.mark.parametrize("finish_only_tail", [False, True])
def test_stream_concat_equals_batch(plain, tok, text, kind, finish_only_tail):  # noqa: ANN001
    # With a finish-only tail the engine sent no stop token (e.g. an abort or a length cut).
    ids = _ids(tok, text) + ([] if finish_only_tail else [EOS])
    batch = batch_view(batch_chat(plain, ids))
    assert batch["content"] == text
    chunks = stream(plain.derender_chat, ids, splits_of(len(ids), kind, seed=len(text)),
                    finish_only_tail=finish_only_tail)  # fmt: skip
    assert same_message(concat_chat(chunks), batch)


def test_role_sent_once_and_usage_chunk(plain, tok):  # noqa: ANN001
    ids = _ids(tok, TEXTS[0]) + [EOS]
    chunks = stream(plain.derender_chat, ids, [1] * len(ids), usage_tail=True,
                    every_body={"prompt_tokens": 7})  # fmt: skip
    roles = [c["delta"]["role"] for r in chunks for c in r["chunk"]["choices"]]
    assert roles[0] == "assistant" and set(roles[1:]) == {None}
    last = chunks[-1]
    assert last["chunk"]["choices"] == []
    assert last["chunk"]["usage"]["prompt_tokens"] == 7
    assert last["chunk"]["usage"]["completion_tokens"] == len(ids)
    assert last["stream_state"] is not None  # the usage-only chunk kept (and verified) the state


@pytest.mark.parametrize(
    ("stop", "include", "expected", "reason"),
    [
        (["STOP"], False, "a<", "STOP"),
        (["STOP"], True, "a<STOP", "STOP"),
        (["###", "stop"], False, "a<STOP>b STOP c \n\n ", "stop"),  # the earliest-ending match
        (["nomatch"], False, TEXTS[2], None),
    ],
)
def test_batch_stop_strings(plain, tok, stop, include, expected, reason):  # noqa: ANN001
    ids = _ids(tok, TEXTS[2]) + [EOS]
    req = chat_request(stop=stop, include_stop_str_in_output=include)
    view = batch_view(batch_chat(plain, ids, chat_request=req))
    assert view["content"] == expected and view["stop_reason"] == reason


def test_batch_stop_string_only_on_stop_finish(plain, tok):  # noqa: ANN001
    ids = _ids(tok, TEXTS[2])
    req = chat_request(stop=["STOP"])
    assert batch_view(batch_chat(plain, ids, finish="length", chat_request=req))["content"] == TEXTS[2]
    # An int stop_reason (a stop token) means no stop-string cut either, as upstream...
    stop_id = _ids(tok, "!")[0]
    req_ids = chat_request(stop=["STOP"], stop_token_ids=[stop_id])
    view = batch_view(batch_chat(plain, ids + [stop_id], stop_reason=stop_id, chat_request=req_ids))
    assert view["content"] == TEXTS[2] and view["stop_reason"] == stop_id
    # ...except an EOS id, which tokens-only engines report as an int (our divergence).
    view = batch_view(batch_chat(plain, ids + [EOS], stop_reason=EOS, chat_request=req))
    assert view["content"] == "a<" and view["stop_reason"] == "STOP"


def test_min_tokens_delays_stop_string(plain, tok):  # noqa: ANN001
    ids = _ids(tok, TEXTS[2]) + [EOS]
    first_stop_tokens = len(_ids(tok, "a<STOP"))
    req = chat_request(stop=["STOP"], min_tokens=first_stop_tokens)
    view = batch_view(batch_chat(plain, ids, chat_request=req))
    assert view["content"] == "a<STOP>b "
    chunks = stream(plain.derender_chat, ids, [1] * len(ids), first_body={"chat_request": req})
    assert same_message(concat_chat(chunks), view)


@pytest.mark.parametrize("kind", ["one", "whole", "random"])
@pytest.mark.parametrize(
    "req",
    [
        chat_request(stop=["STOP"]),
        chat_request(stop=["STOP"], include_stop_str_in_output=True),
        chat_request(stop=["###", "stop", "zzz"]),
        chat_request(stop=["\n\n"], min_tokens=3),
        chat_request(stop=["done"]),
    ],
)
def test_stream_stop_strings_equal_batch(plain, tok, kind, req):  # noqa: ANN001
    ids = _ids(tok, TEXTS[2]) + [EOS]
    batch = batch_view(batch_chat(plain, ids, chat_request=req))
    chunks = stream(plain.derender_chat, ids, splits_of(len(ids), kind, seed=3),
                    first_body={"chat_request": req})  # fmt: skip
    assert same_message(concat_chat(chunks), batch)
    if batch["stop_reason"] is not None and isinstance(batch["stop_reason"], str):
        assert chunks[-1].get("abort_engine_request") is True


def test_stream_holds_back_only_possible_stop_prefix(plain, tok):  # noqa: ANN001
    ids = _ids(tok, "abc STO") + _ids(tok, "P more")
    req = chat_request(stop=["STOP"])
    chunks = stream(plain.derender_chat, ids, [len(_ids(tok, "abc STO")), len(_ids(tok, "P more"))],
                    finish=None, first_body={"chat_request": req})  # fmt: skip
    first = chunks[0]["chunk"]["choices"][0]["delta"]["content"]
    assert first == "abc "  # "STO" may begin "STOP": held back
    assert chunks[1]["chunk"]["choices"][0]["finish_reason"] == "stop"
    assert chunks[1]["chunk"]["choices"][0]["stop_reason"] == "STOP"
    assert chunks[1]["abort_engine_request"] is True


def test_chunks_after_stop_string_are_ignored(plain, tok):  # noqa: ANN001
    ids = _ids(tok, "one STOP two three")
    req = chat_request(stop=["STOP"])
    state = None
    responses = []
    for k, t in enumerate(ids):
        body = {"stream": True, "stream_state": state,
                "generate_chunk": {"request_id": "r", "choices": [{"index": 0, "token_ids": [t]}]}}  # fmt: skip
        if k == 0:
            body["chat_request"] = req
        r = plain.derender_chat(body)
        responses.append(r)
        state = r["stream_state"]
    stopped = [k for k, r in enumerate(responses) if r.get("abort_engine_request")]
    assert stopped and all(responses[k]["chunk"]["choices"] == [] for k in stopped[1:])


def test_stop_token_kept_with_include_stop_str(plain, tok):  # noqa: ANN001
    ids = _ids(tok, "hi") + [EOS]
    req = chat_request(include_stop_str_in_output=True, skip_special_tokens=False)
    assert batch_view(batch_chat(plain, ids, chat_request=req))["content"] == "hi<|im_end|>"


def test_ignore_eos_keeps_primary_eos_token(plain, tok):  # noqa: ANN001
    ids = _ids(tok, "hi") + [EOS]
    req = chat_request(ignore_eos=True, skip_special_tokens=False)
    view = batch_view(batch_chat(plain, ids, chat_request=req))
    assert view["content"] == "hi<|im_end|>" and view["stop_reason"] is None


def test_request_stop_token_id_sets_stop_reason(plain, tok):  # noqa: ANN001
    stop_id = _ids(tok, "!")[0]
    ids = _ids(tok, "hi") + [stop_id]
    view = batch_view(batch_chat(plain, ids, chat_request=chat_request(stop_token_ids=[stop_id])))
    assert view["content"] == "hi" and view["stop_reason"] == stop_id


def test_secondary_eos_from_generation_config(plain, tok):  # noqa: ANN001
    ids = _ids(tok, "hi") + [151643]  # <|endoftext|>, an EOS only in generation_config
    view = batch_view(batch_chat(plain, ids))
    assert view["content"] == "hi" and view["stop_reason"] == 151643


def test_return_token_ids(plain, tok):  # noqa: ANN001
    ids = _ids(tok, "hi") + [EOS]
    out = batch_chat(plain, ids, chat_request=chat_request(return_token_ids=True))
    assert out["choices"][0]["token_ids"] == ids
    assert batch_chat(plain, ids)["choices"][0]["token_ids"] is None
