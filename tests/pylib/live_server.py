# SPDX-License-Identifier: MIT
"""One mlxcel-server (or `mlxcel serve`) on an ephemeral loopback port, for the Python test suites
and benchmarks: started with `--port 0`, its stderr written to a log file that is read until the
"listening on http://...:PORT" line names the port (a server that exits or stays silent for
`start_timeout` seconds raises NotListening, which ends the script with its log unless caught), plain HTTP helpers for JSON requests and
server-sent event streams, and stop() that signals it and waits, killing it only past the timeout.

Scripts outside this folder import it with
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'pylib'))"""
import http.client
import json
import os
import re
import signal
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
DEMO = os.path.join(ROOT, 'models', 'qwen3-demo-44m-4bit')


def link_demo_model(dest, own=(), tokenizer_config=None):
    """Makes `dest` a copy of the demo model made of symlinks, leaving out the files named in `own`
    (the caller writes its own) and, with tokenizer_config (a fixture's path), tokenizer_config.json,
    which is then copied from that file."""
    src = DEMO
    os.makedirs(dest, exist_ok=True)
    skip = set(own) | ({'tokenizer_config.json'} if tokenizer_config else set())
    for f in os.listdir(src):
        if f not in skip:
            os.symlink(os.path.join(src, f), os.path.join(dest, f))
    if tokenizer_config:
        with open(tokenizer_config) as a, open(os.path.join(dest, 'tokenizer_config.json'), 'w') as b:
            b.write(a.read())


class NotListening(SystemExit):
    """The server exited or did not say where it listens in time; the message holds its log."""


class LiveServer:
    def __init__(self, command, log=None, env=None, start_timeout=60):
        """command: the program and its arguments without --port; log: the stderr file (a
        temporary one when None)."""
        self.log = open(log, 'w+') if log else tempfile.TemporaryFile('w+')
        self.p = subprocess.Popen(list(command) + ['--port', '0'], stderr=self.log, stdout=subprocess.DEVNULL,
                                  env=env)
        self.port = None
        deadline = time.time() + start_timeout
        while time.time() < deadline:
            m = re.search(r'listening on http://.*:(\d+)$', self.text(), re.M)
            if m:
                self.port = int(m.group(1))
                break
            if self.p.poll() is not None:
                break
            time.sleep(0.1)
        if not self.port:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()
            raise NotListening('server did not start: ' + self.text()[-4000:])
        self.url = f'http://127.0.0.1:{self.port}'

    def text(self):
        """Everything the server has written to stderr so far."""
        self.log.seek(0)
        return self.log.read()

    def request(self, method, path, body=None, headers=None, timeout=120):
        """One HTTP request (body: a JSON value, sent as JSON); returns (status, body bytes)."""
        c = http.client.HTTPConnection('127.0.0.1', self.port, timeout=timeout)
        c.request(method, path, json.dumps(body) if body is not None else None,
                  dict({'Content-Type': 'application/json'}, **(headers or {})))
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def post(self, path, body, timeout=300):
        """POST a JSON body; returns (status, the parsed JSON reply or None when it is empty)."""
        status, data = self.request('POST', path, body, timeout=timeout)
        return status, json.loads(data) if data else None

    def stream(self, path, body, timeout=300):
        """POST a JSON body with stream true; returns the parsed `data:` events before [DONE]."""
        _, data = self.request('POST', path, dict(body, stream=True), timeout=timeout)
        return [json.loads(line[6:]) for line in data.decode().split('\n')
                if line.startswith('data: ') and line != 'data: [DONE]']

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Sends sig and waits for the exit status; past timeout seconds the server is killed."""
        self.p.send_signal(sig)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait()
