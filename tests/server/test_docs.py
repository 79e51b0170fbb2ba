"""docs/serving.md runs as written: its config is valid, its commands and its Python and
Node.js clients work against `loomctx serve`. Only the upstream (a local server speaking
OpenAI's protocol instead of api.openai.com) and the port are swapped in."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from loomctx.server._config import serve_config_from
from tests.agent._servers import WireServer, openai_text
from tests.server._http import call
from tests.server.conftest import free_port, node_with_openai

DOC = Path(__file__).parents[2] / "docs" / "serving.md"
NODE = Path(__file__).parent / "node"
KEY = "sk-acme-example-key"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_every_snippet_runs(tmp_path: Path) -> None:
    (toml,) = blocks("toml")
    config = tomllib.loads(toml)
    serve_config_from(config["serve"], store=config["store"], embedder=config["embedder"])
    json.loads(blocks("json")[0])
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOOM_KEY": KEY}
    env.pop("LOOM_CONFIG", None)
    env.pop("LOOM_STORE", None)
    sh = blocks("sh")
    install, hashing, start, curl, mcp = sh
    assert install.strip() == "pip install 'loomctx[serve]'"
    done = subprocess.run(
        ["bash", "-c", hashing],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert re.fullmatch(r"sha256:[0-9a-f]{64}\n", done.stdout)
    assert (tmp_path / "acme.key").read_text().startswith("sk-acme-")
    wire = WireServer().start()
    port = str(free_port())
    try:
        wire.script(
            openai_text("A window is what the model sees."),
            openai_text("Ada."),
            openai_text("Noted."),
            openai_text("Your name is Ada."),
            openai_text("Hello from Anthropic's client."),
            openai_text("Hello from Node."),
        )
        (tmp_path / "loom.toml").write_text(
            toml.replace("https://api.openai.com/v1", wire.openai_url), encoding="utf-8"
        )
        server = subprocess.Popen(
            ["bash", "-c", start.strip().replace("8700", port)],
            cwd=tmp_path,
            env=env,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while True:
                try:
                    if call("GET", f"{url}/readyz")[0] == 200:
                        break
                except OSError:
                    pass
                assert server.poll() is None, "loomctx serve exited"
                assert time.monotonic() < deadline
                time.sleep(0.1)
            chat, responses, messages = blocks("python")
            expected = [
                ("A window is what the model sees.", "Ada.", "report: rep_"),
                ("Your name is Ada.",),  # the Responses API, with previous_response_id
                ("Hello from Anthropic's client.",),  # the Messages API
            ]
            for python, lines in zip((chat, responses, messages), expected, strict=True):
                out = subprocess.run(
                    [sys.executable, "-c", python.replace("8700", port)],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                )
                assert out.returncode == 0, out.stderr
                for line in lines:
                    assert line in out.stdout
            (js,) = blocks("js")
            node = node_with_openai()
            script = NODE / "doc_snippet.mjs"
            script.write_text(js.replace("8700", port), encoding="utf-8")
            try:
                out = subprocess.run(
                    [node, str(script)],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                )
            finally:
                script.unlink()
            assert out.returncode == 0, out.stderr
            assert "Hello from Node." in out.stdout
            out = subprocess.run(
                ["bash", "-c", curl.replace("8700", port)],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            assert json.loads(out.stdout) == {"document_id": "lunch", "knowledge_base": "handbook"}
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
        # `loomctx mcp` serves stdio until its input ends.
        done = subprocess.run(
            ["bash", "-c", mcp],
            cwd=tmp_path,
            env=env,
            input="",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    finally:
        wire.stop()
