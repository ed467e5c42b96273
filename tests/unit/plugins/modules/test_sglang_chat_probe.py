# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._chat import (
    ChatProbe,
    ChatProbeError,
    split_base_url,
)
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._http import HttpClient
from ansible_collections.mindverse.sglang_pd.plugins.modules import sglang_chat_probe
from fake_sglang import no_proxy_env  # noqa: F401  pylint: disable=unused-import
from fake_sglang import ChatApp, FakeServer
from module_runner import run_module, run_module_stdout

CONTENT = 'Paris is the capital of France.'


def probe(server, **kwargs):
    client = HttpClient(timeout=kwargs.get('timeout', 10), api_key=kwargs.pop('api_key', None))
    return ChatProbe(client, kwargs.pop('url', server.url), **kwargs)


def chat_requests(app):
    return [r.json() for r in app.requests if r.path == '/v1/chat/completions']


@pytest.mark.parametrize('url, base', [
    ('http://r:8000', 'http://r:8000'),
    ('http://r:8000/', 'http://r:8000'),
    ('http://r:8000/v1', 'http://r:8000'),
    ('http://r:8000/v1/chat/completions', 'http://r:8000'),
    ('http://r:8000/prefix/v1/', 'http://r:8000/prefix'),
])
def test_split_base_url(url, base):
    assert split_base_url(url) == base


# ----------------------------------------------------------------- non-streaming
def test_plain_completion_discovers_the_model():
    app = ChatApp(model='glm-5.2-fp8', content=CONTENT)
    with FakeServer(app) as server:
        result = probe(server).run()
    assert [r.path for r in app.requests] == ['/v1/models', '/v1/chat/completions']
    sent = chat_requests(app)[0]
    assert sent['model'] == 'glm-5.2-fp8'
    assert sent['max_tokens'] == 16
    assert sent['stream'] is False
    assert 'stream_options' not in sent
    assert sent['messages'][0]['role'] == 'user'
    assert result['status'] == 200
    assert result['content'] == CONTENT
    assert result['model'] == 'glm-5.2-fp8'
    assert result['usage']['completion_tokens'] == len(CONTENT.split())
    assert result['ttft'] == result['latency'] > 0
    assert result['chunks'] == 0
    assert result['finish_reason'] == 'length'
    assert result['url'] == server.url + '/v1/chat/completions'


def test_given_model_and_messages_skip_discovery():
    app = ChatApp(model='served-name')
    messages = [dict(role='system', content='Be brief.'), dict(role='user', content='Hi')]
    with FakeServer(app) as server:
        probe(server, url=server.url + '/v1', model='my-model', messages=messages, max_tokens=4,
              api_key='k').run()
    assert [r.path for r in app.requests] == ['/v1/chat/completions']
    sent = chat_requests(app)[0]
    assert sent['model'] == 'my-model' and sent['messages'] == messages and sent['max_tokens'] == 4
    assert app.requests[0].headers['Authorization'] == 'Bearer k'


def test_plain_completion_without_usage():
    with FakeServer(ChatApp(usage=False)) as server:
        with pytest.raises(ChatProbeError) as err:
            probe(server).run()
        assert 'no "usage" object' in err.value.msg
        result = probe(server, require_usage=False).run()
    assert result['usage'] == {}


def test_non_200_fails_with_a_short_body_excerpt():
    with FakeServer(ChatApp(status=503)) as server:
        with pytest.raises(ChatProbeError) as err:
            probe(server, model='m').run()
    msg = err.value.msg
    assert server.url + '/v1/chat/completions' in msg
    assert 'expected HTTP 200, got HTTP 503' in msg
    assert 'xxxx' in msg
    assert len(msg) < 700  # the 2000-character body is cut to 500
    assert err.value.result['status'] == 503


def test_malformed_json_fails():
    with FakeServer(ChatApp(malformed=True)) as server:
        with pytest.raises(ChatProbeError) as err:
            probe(server, model='m').run()
    assert 'not JSON' in err.value.msg
    assert '{"id": "cmpl-1"' in err.value.msg


def test_timeout_fails():
    with FakeServer(ChatApp(delay=1.5)) as server:
        with pytest.raises(ChatProbeError) as err:
            probe(server, model='m', timeout=0.3).run()
    assert 'timeout' in err.value.msg
    assert server.url in err.value.msg


def test_expected_content():
    with FakeServer(ChatApp(content=CONTENT)) as server:
        assert probe(server, expected_content='Paris').run()['content'] == CONTENT
        with pytest.raises(ChatProbeError) as err:
            probe(server, expected_content='Berlin').run()
    assert "expected the answer to contain 'Berlin'" in err.value.msg
    assert CONTENT in err.value.msg


def test_no_model_listed_fails():
    with FakeServer(ChatApp(models=[])) as server:
        with pytest.raises(ChatProbeError) as err:
            probe(server).run()
    assert server.url + '/v1/models' in err.value.msg
    assert 'Set the model option' in err.value.msg


# ----------------------------------------------------------------- streaming
def test_stream_with_usage():
    app = ChatApp(content=CONTENT, chunk_delay=0.05)
    with FakeServer(app) as server:
        result = probe(server, stream=True).run()
    sent = chat_requests(app)[0]
    assert sent['stream'] is True
    assert sent['stream_options'] == {'include_usage': True}
    assert result['content'] == CONTENT
    words = len(CONTENT.split())
    # role chunk + one chunk per word + finish chunk + usage chunk
    assert result['chunks'] == words + 3
    assert result['usage'] == dict(prompt_tokens=result['usage']['prompt_tokens'], completion_tokens=words,
                                   total_tokens=result['usage']['prompt_tokens'] + words)
    assert 0 < result['ttft'] < result['latency']
    assert result['latency'] - result['ttft'] >= 0.05 * (words - 1) * 0.8
    assert result['finish_reason'] == 'length'
    assert result['model'] == 'glm-test'


def test_stream_without_usage_fails():
    with FakeServer(ChatApp(usage=False)) as server:
        with pytest.raises(ChatProbeError) as err:
            probe(server, stream=True).run()
        assert 'the stream carried no chunk with "usage"' in err.value.msg
        assert err.value.result['chunks'] > 0
        result = probe(server, stream=True, require_usage=False).run()
    assert result['usage'] == {}


def test_stream_cut_off_fails():
    with FakeServer(ChatApp(truncate=True)) as server:
        with pytest.raises(ChatProbeError) as err:
            probe(server, stream=True, require_usage=False).run()
    assert 'without "data: [DONE]"' in err.value.msg


def test_stream_that_is_plain_json_fails():
    class IgnoresStream(ChatApp):
        def route(self, request):
            if request.method == 'POST':
                body = request.json()
                body['stream'] = False
                request.body = json.dumps(body).encode()
            return super().route(request)

    with FakeServer(IgnoresStream()) as server:
        with pytest.raises(ChatProbeError) as err:
            probe(server, stream=True).run()
    assert 'no data events' in err.value.msg
    assert 'application/json' in err.value.msg


def test_stream_slower_than_the_timeout_fails():
    with FakeServer(ChatApp(content='a b c d e f g h', chunk_delay=0.15)) as server:
        with pytest.raises(ChatProbeError) as err:
            probe(server, stream=True, timeout=0.4).run()
    assert 'reading the stream failed' in err.value.msg


def test_sse_parser_handles_comments_and_multiline_data():
    lines = [b': keep-alive\n', b'data: {"choices": [{"delta": \n', b'data: {"content": "Hi"}}]}\n', b'\n',
             b'event: message\n', b'data: {"choices": [], "usage": {"total_tokens": 3}}\r\n', b'\r\n',
             b'data: [DONE]\n', b'\n']
    chat = ChatProbe(HttpClient(), 'http://x', model='m', stream=True)
    chat._deadline = float('inf')  # pylint: disable=protected-access
    events = list(chat._events(lines))  # pylint: disable=protected-access
    assert [json.loads(e) for e in events[:2]] == [
        {'choices': [{'delta': {'content': 'Hi'}}]},
        {'choices': [], 'usage': {'total_tokens': 3}},
    ]
    assert events[2] == '[DONE]'


# ----------------------------------------------------------------- module end to end
@pytest.mark.parametrize('check_mode', [False, True])
@pytest.mark.parametrize('stream', [False, True])
def test_module_runs_in_check_mode_and_never_changes(check_mode, stream):
    app = ChatApp(content=CONTENT)
    with FakeServer(app) as server:
        args = dict(url=server.url, stream=stream, expected_content='Paris')
        first = run_module(sglang_chat_probe, args, check_mode=check_mode)
        second = run_module(sglang_chat_probe, args, check_mode=check_mode)
    for result in (first, second):
        assert not result.get('failed'), result
        assert result['changed'] is False
        assert result['content'] == CONTENT
        assert set(result) >= {'status', 'latency', 'ttft', 'usage', 'content', 'chunks', 'model'}
    assert len(chat_requests(app)) == 2


def test_module_stream_without_usage_fails():
    with FakeServer(ChatApp(usage=False)) as server:
        result = run_module(sglang_chat_probe, dict(url=server.url, stream=True))
    assert result['failed'] is True
    assert result['changed'] is False
    assert 'usage' in result['msg']


def test_module_never_prints_the_api_key(capsys):
    app = ChatApp(api_key='SUPER-SECRET-77')
    with FakeServer(app) as server:
        out = run_module_stdout(sglang_chat_probe, dict(url=server.url, api_key='SUPER-SECRET-77'), capsys)
    assert out['status'] == 200
    assert 'SUPER-SECRET-77' not in json.dumps(out)
