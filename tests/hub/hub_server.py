#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A stand-in for the Hugging Face Hub, for the download tests (python3 standard library only).

It listens on loopback only, on two ephemeral ports: the "hub" port speaks the Hub protocol
(GET /api/models/{repo}/revision/{rev}; HEAD/GET /{repo}/resolve/{rev}/{file} with X-Repo-Commit,
ETag, X-Linked-Etag, X-Linked-Size and, for LFS files, a 302 redirect to the other port) and the
"cdn" port serves LFS blobs by sha256 with Range support. Every request is logged (port, method,
path, Range, Authorization) and faults can be injected: drop the connection at a byte offset of a
file, corrupt a byte, answer a given HTTP status. The servers stop by themselves after `lifetime`
seconds.

Repos: ETags are computed as the Hub does (git blob sha1 for regular files, sha256 for LFS files:
*.safetensors and files of 1 MiB or more). A repo can require a token (private: 401 RepoNotFound
without it) or be gated (403 GatedRepo on resolve without it); an unknown repo answers 401
RepoNotFound without a token and 404 with one, as the Hub does.

Run alone for manual use: hub_server.py MODEL_DIR [REPO_ID] prints the endpoint and serves until
the lifetime ends."""
import hashlib, http.server, json, os, re, socketserver, sys, threading, time, urllib.parse

LFS_MIN = 1 << 20


def git_blob_sha1(data):
    return hashlib.sha1(b'blob %d\0' % len(data) + data).hexdigest()


class Repo:
    def __init__(self, repo_id, commits, refs, token=None, gated=False, renamed_from=None):
        """commits: {commit: {path: bytes}}; refs: {branch or tag: commit}."""
        self.id, self.commits, self.refs = repo_id, commits, refs
        self.token, self.gated, self.renamed_from = token, gated, renamed_from

    def commit_for(self, rev):
        if rev in self.commits:
            return rev
        return self.refs.get(rev)


def is_lfs(path, data):
    return path.endswith('.safetensors') or len(data) >= LFS_MIN


def make_commit_id(files, salt=''):
    h = hashlib.sha1(salt.encode())
    for p in sorted(files):
        h.update(p.encode() + b'\0' + hashlib.sha256(files[p]).digest())
    return h.hexdigest()


class Hub:
    def __init__(self, lifetime=600):
        self.repos = {}
        self.blobs = {}          # sha256 -> bytes (the "CDN")
        self.log = []
        self.faults = []         # dicts: kind, file (substring of the path), count, offset, status
        self.lock = threading.Lock()
        handler_hub = type('HubHandler', (HubHandler,), {'hub': self})
        handler_cdn = type('CdnHandler', (CdnHandler,), {'hub': self})
        self.hub_server = ThreadingServer(('127.0.0.1', 0), handler_hub)
        self.cdn_server = ThreadingServer(('127.0.0.1', 0), handler_cdn)
        self.endpoint = 'http://127.0.0.1:%d' % self.hub_server.server_address[1]
        self.cdn = 'http://127.0.0.1:%d' % self.cdn_server.server_address[1]
        for s in (self.hub_server, self.cdn_server):
            threading.Thread(target=s.serve_forever, daemon=True).start()
        self.timer = threading.Timer(lifetime, self.stop)
        self.timer.daemon = True
        self.timer.start()

    def stop(self):
        for s in (self.hub_server, self.cdn_server):
            s.shutdown()
            s.server_close()
        self.timer.cancel()

    def add_repo(self, repo):
        self.repos[repo.id] = repo
        for files in repo.commits.values():
            for p, data in files.items():
                if is_lfs(p, data):
                    self.blobs[hashlib.sha256(data).hexdigest()] = (p, data)

    def fail(self, kind, file='', count=1, offset=None, status=None, delay=0.0, body=b'', header=''):
        """kind: 'drop' (close the connection at file byte `offset`), 'corrupt' (flip the byte at
        `offset`), 'status' (answer `status`), 'slow' (wait `delay` s before each body), 'raw'
        (answer 200 with `body`), 'strip' (leave out the response header `header`); `count` uses
        ('slow' and 'strip' faults are never used up)."""
        with self.lock:
            self.faults.append(dict(kind=kind, file=file, count=count, offset=offset, status=status, delay=delay,
                                    body=body, header=header))

    def clear(self):
        with self.lock:
            self.faults.clear()
            self.log.clear()

    def take_fault(self, kind, path):
        with self.lock:
            for f in self.faults:
                if f['kind'] == kind and f['count'] > 0 and f['file'] in path:
                    return f
        return None

    def use_fault(self, f):
        with self.lock:
            f['count'] -= 1

    def record(self, port, handler):
        with self.lock:
            self.log.append(dict(port=port, method=handler.command, path=urllib.parse.unquote(handler.path),
                                 range=handler.headers.get('Range'), auth=handler.headers.get('Authorization')))

    def requests(self, port=None, method=None, contains=''):
        with self.lock:
            return [r for r in self.log if (port is None or r['port'] == port) and
                    (method is None or r['method'] == method) and contains in r['path']]


class ThreadingServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64  # parallel ranged requests connect at once; a short backlog stalls them 1 s

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that went away is expected
            super().handle_error(request, client_address)


class BaseHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    hub = None

    def log_message(self, *args):
        pass

    def send_header(self, keyword, value):
        strip = self.hub.take_fault('strip', urllib.parse.unquote(self.path))
        if not (strip and keyword.lower() == strip['header'].lower()):
            super().send_header(keyword, value)

    def answer(self, status, headers=(), body=b''):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        if self.command != 'HEAD':
            self.wfile.write(body)

    def error(self, status, code, message, extra=()):
        self.answer(status, [('X-Error-Code', code), ('X-Error-Message', message), *extra],
                    json.dumps({'error': message}).encode())

    def status_fault(self, path):
        f = self.hub.take_fault('status', path)
        if f:
            self.hub.use_fault(f)
            self.error(f['status'], 'Injected', 'injected failure')
            return True
        return False

    def send_content(self, data, path, extra_headers=()):
        """Answers GET/HEAD for data with Range support and the drop/corrupt faults."""
        total = len(data)
        start, end, status = 0, total - 1, 200
        rng = self.headers.get('Range')
        if rng:
            m = re.fullmatch(r'bytes=(\d+)-(\d*)', rng.strip())
            if not m:
                return self.answer(416, [('Content-Range', 'bytes */%d' % total)])
            start = int(m.group(1))
            end = min(int(m.group(2)), total - 1) if m.group(2) else total - 1
            if start >= total or end < start:
                return self.answer(416, [('Content-Range', 'bytes */%d' % total)])
            status = 206
        self.send_response(status)
        for k, v in extra_headers:
            self.send_header(k, v)
        self.send_header('Accept-Ranges', 'bytes')
        self.send_header('Content-Length', str(end - start + 1))
        if status == 206:
            self.send_header('Content-Range', 'bytes %d-%d/%d' % (start, end, total))
        self.end_headers()
        if self.command == 'HEAD':
            return
        slow = self.hub.take_fault('slow', path)
        if slow:
            time.sleep(slow['delay'])
        body = bytearray(data[start:end + 1])
        corrupt = self.hub.take_fault('corrupt', path)
        if corrupt and start <= corrupt['offset'] <= end:
            self.hub.use_fault(corrupt)
            body[corrupt['offset'] - start] ^= 0xFF
        drop = self.hub.take_fault('drop', path)
        if drop and start <= drop['offset'] <= end:
            self.hub.use_fault(drop)
            self.wfile.write(bytes(body[:drop['offset'] - start]))
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(bytes(body))


class HubHandler(BaseHandler):
    def do_HEAD(self):
        self.handle_hub()

    def do_GET(self):
        self.handle_hub()

    def token_ok(self, repo):
        return self.headers.get('Authorization') == 'Bearer ' + repo.token if repo.token else True

    def handle_hub(self):
        self.hub.record('hub', self)
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        if self.status_fault(path):
            return
        raw = self.hub.take_fault('raw', path)
        if raw:
            self.hub.use_fault(raw)
            return self.answer(200, [('Content-Type', 'application/json')], raw['body'])
        has_auth = self.headers.get('Authorization') is not None
        m = re.fullmatch(r'/api/models/([^/]+/[^/]+)/revision/(.+)', path)
        if m:
            return self.revision(m.group(1), m.group(2), has_auth)
        m = re.fullmatch(r'/([^/]+/[^/]+)/resolve/([^/]+)/(.+)', path)
        if m:
            return self.resolve(m.group(1), m.group(2), m.group(3), has_auth)
        self.error(404, 'NotFound', 'no such route')

    def find_repo(self, repo_id, has_auth):
        repo = self.hub.repos.get(repo_id)
        for r in self.hub.repos.values():
            if r.renamed_from == repo_id:
                return r, True
        if repo is None or (repo.token and not repo.gated and not self.token_ok(repo)):
            if has_auth:
                self.error(404, 'RepoNotFound', 'Repository not found')
            else:
                self.error(401, 'RepoNotFound', 'Invalid username or password.')
            return None, False
        return repo, False

    def revision(self, repo_id, rev, has_auth):
        repo, renamed = self.find_repo(repo_id, has_auth)
        if not repo:
            return
        if renamed:
            return self.answer(307, [('Location', '/api/models/%s/revision/%s' % (repo.id, urllib.parse.quote(rev, safe='')))])
        commit = repo.commit_for(rev)
        if not commit:
            return self.error(404, 'RevisionNotFound', 'Invalid rev id: %s' % rev)
        siblings = [{'rfilename': p} for p in sorted(repo.commits[commit])]
        self.answer(200, [('Content-Type', 'application/json')],
                    json.dumps({'id': repo.id, 'sha': commit, 'siblings': siblings, 'private': bool(repo.token),
                                'gated': repo.gated}).encode())

    def resolve(self, repo_id, rev, file, has_auth):
        repo, renamed = self.find_repo(repo_id, has_auth)
        if not repo:
            return
        if renamed:
            return self.answer(307, [('Location', '/%s/resolve/%s/%s' % (repo.id, rev, urllib.parse.quote(file)))])
        if repo.gated and not self.token_ok(repo):
            return self.error(403, 'GatedRepo', 'Access to model %s is restricted.' % repo.id)
        commit = repo.commit_for(rev)
        if not commit:
            return self.error(404, 'RevisionNotFound', 'Invalid rev id: %s' % rev)
        data = repo.commits[commit].get(file)
        if data is None:
            return self.error(404, 'EntryNotFound', 'Entry not found', [('X-Repo-Commit', commit)])
        if is_lfs(file, data):
            sha = hashlib.sha256(data).hexdigest()
            pointer = ('version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n' % (sha, len(data))).encode()
            return self.answer(302, [('Location', '%s/blobs/%s?sig=%s' % (self.hub.cdn, sha, sha[:8])),
                                     ('X-Repo-Commit', commit), ('ETag', '"%s"' % git_blob_sha1(pointer)),
                                     ('X-Linked-Etag', '"%s"' % sha), ('X-Linked-Size', str(len(data)))])
        self.send_content(data, file, [('X-Repo-Commit', commit), ('ETag', '"%s"' % git_blob_sha1(data))])


class CdnHandler(BaseHandler):
    def do_HEAD(self):
        self.handle_cdn()

    def do_GET(self):
        self.handle_cdn()

    def handle_cdn(self):
        self.hub.record('cdn', self)
        path = urllib.parse.urlsplit(self.path).path
        m = re.fullmatch(r'/blobs/([0-9a-f]{64})', path)
        if not m or m.group(1) not in self.hub.blobs:
            return self.error(404, 'NotFound', 'no such blob')
        name, data = self.hub.blobs[m.group(1)]
        if self.status_fault(name):
            return
        self.send_content(data, name)


def read_folder(folder, skip=()):
    files = {}
    for root, _, names in os.walk(folder):
        for n in names:
            full = os.path.join(root, n)
            rel = os.path.relpath(full, folder)
            if rel not in skip:
                files[rel] = open(full, 'rb').read()
    return files


if __name__ == '__main__':
    folder = sys.argv[1]
    repo_id = sys.argv[2] if len(sys.argv) > 2 else 'local/model'
    hub = Hub(lifetime=3600)
    files = read_folder(folder)
    commit = make_commit_id(files)
    hub.add_repo(Repo(repo_id, {commit: files}, {'main': commit}))
    print('HF_ENDPOINT=%s  (repo %s at %s)' % (hub.endpoint, repo_id, commit), flush=True)
    try:
        while hub.timer.is_alive():
            time.sleep(1)
    except KeyboardInterrupt:
        pass
