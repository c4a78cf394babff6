#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Hugging Face Hub downloads against a local stand-in hub (hub_server.py, loopback only):
a fresh download then generation from `-m org/name`; a second run that makes no content request;
the cache layout huggingface_hub makes (blobs by ETag, relative snapshot symlinks, refs); resume
after a dropped connection, in the same run and in the next one; corrupt data detected, removed
and fetched again; offline mode; the token sent only to the endpoint, never to the redirect host;
--revision, --include, --local-dir; convert --hf-path and inspect from a repo id; and the error
messages (404, 401/403 with the HF_TOKEN hint, gated, 500, no network, disk full, unsafe names);
Ctrl-C leaves a resumable partial file; two concurrent downloads transfer a file once.

usage: test_hub.py PATH/TO/mlxcel   (run from the repository root)"""
import hashlib, os, pty, select, shutil, socket, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hub_server as hs
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'pylib'))
from checks import check, finish  # noqa: E402
from live_server import LiveServer, NotListening  # noqa: E402

MLXCEL = os.path.abspath(sys.argv[1])
DEMO = 'models/qwen3-demo-44m-4bit'
TINY = 'tests/fixtures/models/qwen3-bf16'
REPO = 'mlxcel-test/demo'


# --- the stand-in hub ----------------------------------------------------------------------------
hub = hs.Hub(lifetime=900)
demo_files = hs.read_folder(DEMO)
demo_files['README.md'] = b'# demo\nnot a model file\n'
demo_files['sub/notes.txt'] = b'notes for the main branch\n'
main_commit = hs.make_commit_id(demo_files)
old_files = dict(demo_files)
old_files['sub/notes.txt'] = b'notes of the first release\n'
v1_commit = hs.make_commit_id(old_files, 'v1')
hub.add_repo(hs.Repo(REPO, {main_commit: demo_files, v1_commit: old_files}, {'main': main_commit, 'v1.0': v1_commit},
                     renamed_from='mlxcel-test/old-demo'))
small = {'config.json': demo_files['config.json'], 'notes.txt': b'private\n'}
hub.add_repo(hs.Repo('mlxcel-test/private', {hs.make_commit_id(small, 'p'): small},
                     {'main': hs.make_commit_id(small, 'p')}, token='hf_private_token'))
hub.add_repo(hs.Repo('mlxcel-test/gated', {hs.make_commit_id(small, 'g'): small},
                     {'main': hs.make_commit_id(small, 'g')}, token='hf_gated_token', gated=True))
evil = {'config.json': b'{}', '../escape.json': b'{}'}
hub.add_repo(hs.Repo('mlxcel-test/evil', {hs.make_commit_id(evil, 'e'): evil}, {'main': hs.make_commit_id(evil, 'e')}))
tiny = hs.read_folder(TINY, skip=('reference.safetensors', 'reference.json'))
hub.add_repo(hs.Repo('mlxcel-test/tiny-bf16', {hs.make_commit_id(tiny, 't'): tiny}, {'main': hs.make_commit_id(tiny, 't')}))

tmp_root = tempfile.mkdtemp(prefix='mlxcel-hub-')
SAFE = demo_files['model.safetensors']
SAFE_SHA = hashlib.sha256(SAFE).hexdigest()


def fresh_home(name):
    home = os.path.join(tmp_root, name)
    os.makedirs(home)
    return home


def run(args, home, extra_env=None, timeout=300):
    env = {k: v for k, v in os.environ.items() if not k.startswith('HF_')}
    env.update(HF_HOME=home, HF_ENDPOINT=hub.endpoint)
    env.update(extra_env or {})
    p = subprocess.run([MLXCEL] + args, capture_output=True, timeout=timeout, env=env)
    return p.returncode, p.stdout.decode('utf-8', 'replace'), p.stderr.decode('utf-8', 'replace')


def repo_dir(home, repo=REPO):
    org, name = repo.split('/')
    return os.path.join(home, 'hub', f'models--{org}--{name}')


def content_requests():
    """GETs that transfer file content: resolve GETs on the hub port and every CDN GET."""
    return [r for r in hub.log if r['method'] == 'GET' and (r['port'] == 'cdn' or '/resolve/' in r['path'])]


def etag_of(path, data):
    return hashlib.sha256(data).hexdigest() if hs.is_lfs(path, data) else hs.git_blob_sha1(data)


def sha256_file(path):
    return hashlib.sha256(open(path, 'rb').read()).hexdigest()


DEFAULT_SET = sorted(p for p in demo_files if p != 'README.md')

# --- a fresh download through -m, then generation -------------------------------------------------
home = fresh_home('main')
hub.clear()
rc, out, err = run(['generate', '-m', REPO, '-p', 'Hello', '-n', '3', '--temp', '0'], home)
check('generate -m org/name downloads the model and generates', rc == 0 and out.startswith(' you are'), out + err)
check('plain progress lines when stderr is not a terminal',
      'download: model.safetensors (24.6 MB)' in err and 'download: model.safetensors done' in err and '\r' not in err, err)
api = hub.requests('hub', 'GET', '/api/models/')
check('one revision request', len(api) == 1 and api[0]['path'] == f'/api/models/{REPO}/revision/main', api)
heads = hub.requests('hub', 'HEAD')
check('one HEAD per selected file', sorted(r['path'].split('/resolve/')[1].split('/', 1)[1] for r in heads) == DEFAULT_SET,
      [r['path'] for r in heads])
cdn_gets = hub.requests('cdn', 'GET', SAFE_SHA)
check('the large file comes from the redirect host in parallel ranged requests',
      len(cdn_gets) >= 8 and all(r['range'] and r['range'].startswith('bytes=') for r in cdn_gets), len(cdn_gets))
check('README.md is not in the default file set', not hub.requests(contains='README.md'))

# --- the layout huggingface_hub makes --------------------------------------------------------------
rd = repo_dir(home)
check('refs/main holds the commit (no newline)', open(os.path.join(rd, 'refs', 'main')).read() == main_commit)
snap = os.path.join(rd, 'snapshots', main_commit)
layout_ok, detail = True, []
for p in DEFAULT_SET:
    link = os.path.join(snap, p)
    want = '../' * p.count('/') + '../../blobs/' + etag_of(p, demo_files[p])
    if not os.path.islink(link) or os.readlink(link) != want:
        layout_ok = False
        detail.append((p, os.readlink(link) if os.path.islink(link) else 'not a symlink', want))
    elif open(link, 'rb').read() != demo_files[p]:
        layout_ok = False
        detail.append((p, 'content differs'))
check('snapshots/<commit>/<file> are relative symlinks to blobs/<etag>', layout_ok, detail)
blobs = sorted(os.listdir(os.path.join(rd, 'blobs')))
check('blobs are named by ETag (sha256 for LFS, git blob sha1 otherwise), nothing else',
      blobs == sorted(etag_of(p, demo_files[p]) for p in DEFAULT_SET), blobs)
check('sub/notes.txt links three levels up', os.readlink(os.path.join(snap, 'sub', 'notes.txt')).startswith('../../../blobs/'))
check('lock files in .locks/models--ORG--NAME',
      os.path.isfile(os.path.join(home, 'hub', '.locks', 'models--mlxcel-test--demo', SAFE_SHA + '.lock')))
check('CACHEDIR.TAG', open(os.path.join(home, 'hub', 'CACHEDIR.TAG')).read().startswith('Signature: 8a477f597d28d172789f06886806bc55'))
check('the printed snapshot is the one used', snap in err, err)

# --- second runs: no content requests ---------------------------------------------------------------
hub.clear()
rc, out, err = run(['download', REPO], home)
check('download of a cached repo: exit 0, prints the snapshot', rc == 0 and out.strip() == snap, out + err)
check('download of a cached repo makes no content request (only the revision request)',
      len(hub.log) == 1 and '/api/models/' in hub.log[0]['path'], hub.log)
hub.clear()
rc, out, err = run(['generate', '-m', REPO, '-p', 'Hello', '-n', '3', '--temp', '0'], home)
check('generate -m of a cached model makes no request at all', rc == 0 and out.startswith(' you are') and not hub.log,
      (hub.log, err))
rc, out, err = run(['inspect', '-m', REPO], home)
check('inspect -m org/name', rc == 0 and 'qwen3' in out, out + err)
rc, out, err = run(['bench', '-m', REPO, '-p', '8', '-n', '2', '--reps', '1'], home)
check('bench -m org/name', rc == 0 and not hub.log, out + err)

p = subprocess.run([MLXCEL, 'chat', '-m', REPO, '-n', '3', '--temp', '0'], input=b'Hello\n/exit\n', capture_output=True,
                   timeout=300, env=dict({k: v for k, v in os.environ.items() if not k.startswith('HF_')},
                                         HF_HOME=home, HF_ENDPOINT=hub.endpoint))
check('chat -m org/name', p.returncode == 0 and not hub.log, p.stderr.decode()[-500:])

# serve -m org/name on a fresh cache: downloads, then answers /health.
serve_home = fresh_home('serve')
hub.clear()
try:
    srv = LiveServer([MLXCEL, 'serve', '-m', REPO], start_timeout=180,
                     env=dict({k: v for k, v in os.environ.items() if not k.startswith('HF_')}, HF_HOME=serve_home,
                              HF_ENDPOINT=hub.endpoint))
    health = urllib.request.urlopen(srv.url + '/health', timeout=30).status
    srv.stop(timeout=60)
    serve_err = srv.text()
except NotListening as e:
    health, serve_err = None, str(e)
check('serve -m org/name downloads the model, then serves', health == 200 and
      'download: model.safetensors done' in serve_err, serve_err[-800:])

# --- offline mode ------------------------------------------------------------------------------------
hub.clear()
rc, out, err = run(['generate', '-m', REPO, '-p', 'Hello', '-n', '3', '--temp', '0'], home, {'HF_HUB_OFFLINE': '1'})
check('offline with the model cached generates', rc == 0 and out.startswith(' you are'), out + err)
rc, out, err = run(['download', REPO], home, {'HF_HUB_OFFLINE': '1'})
check('offline download of a cached repo prints the snapshot', rc == 0 and out.strip() == snap, out + err)
empty = fresh_home('offline')
rc, out, err = run(['generate', '-m', REPO, '-p', 'Hello'], empty, {'HF_HUB_OFFLINE': 'yes'})
check('offline with nothing cached: exit 1 naming HF_HUB_OFFLINE and the cache folder',
      rc == 1 and 'HF_HUB_OFFLINE=1 is set' in err and 'models--mlxcel-test--demo' in err, err)
check('offline mode makes no request', not hub.log, hub.log)

# --- another revision shares the blobs ----------------------------------------------------------------
hub.clear()
rc, out, err = run(['download', REPO, '--revision', 'v1.0'], home)
v1_snap = os.path.join(rd, 'snapshots', v1_commit)
check('--revision v1.0: refs/v1.0 and its snapshot', rc == 0 and out.strip() == v1_snap and
      open(os.path.join(rd, 'refs', 'v1.0')).read() == v1_commit, out + err)
check('--revision: only the changed file is fetched (shared blobs)',
      [r['path'].rsplit('/', 1)[-1] for r in content_requests()] == ['notes.txt'], content_requests())
check('--revision: the changed file has its own blob',
      open(os.path.join(v1_snap, 'sub', 'notes.txt'), 'rb').read() == old_files['sub/notes.txt'])
hub.clear()
rc, out, err = run(['download', REPO, '--revision', v1_commit], home)
check('--revision COMMIT already cached: no content request', rc == 0 and out.strip() == v1_snap and not content_requests(),
      out + err)
rc, out, err = run(['download', REPO, '--revision', 'nope'], home)
check('unknown revision: exit 1 naming it', rc == 1 and "revision 'nope' not found" in err, err)

# --- the token goes to the endpoint only ---------------------------------------------------------------
home = fresh_home('token')
hub.clear()
rc, out, err = run(['download', REPO, '--include', '*.safetensors', '--include', 'config.json'], home,
                    {'HF_TOKEN': 'hf_secret_value'})
hub_reqs, cdn_reqs = hub.requests('hub'), hub.requests('cdn')
check('token download ok', rc == 0, err)
check('every request to the endpoint carries the token',
      hub_reqs and all(r['auth'] == 'Bearer hf_secret_value' for r in hub_reqs), hub_reqs)
check('no request to the redirect host carries it', cdn_reqs and all(r['auth'] is None for r in cdn_reqs), cdn_reqs)
check('--include selects exactly the matching files',
      sorted(os.listdir(os.path.join(repo_dir(home), 'snapshots', main_commit))) == ['config.json', 'model.safetensors'])
hub.clear()
rc, out, err = run(['generate', '-m', REPO, '-p', 'Hello', '-n', '3', '--temp', '0'], home)
fetched = sorted(r['path'].rsplit('/', 1)[-1] for r in hub.requests('hub', 'GET', '/resolve/')) + \
    sorted(r['path'] for r in hub.requests('cdn', 'GET'))
tok_sha = hashlib.sha256(demo_files['tokenizer.json']).hexdigest()
check('-m with an incomplete snapshot fetches only the missing files, then generates',
      rc == 0 and out.startswith(' you are') and SAFE_SHA not in ' '.join(fetched) and
      any(tok_sha in f for f in fetched) and 'tokenizer_config.json' in fetched, (fetched, err))

# --- private, gated, unknown repos, server errors, no network ---------------------------------------------
home = fresh_home('errors')
rc, out, err = run(['download', 'mlxcel-test/private'], home)
check('private repo without a token: exit 1, HTTP 401 and how to set HF_TOKEN',
      rc == 1 and 'HTTP 401' in err and 'HF_TOKEN' in err and os.path.join(home, 'token') in err, err)
with open(os.path.join(home, 'token'), 'w') as f:
    f.write('hf_private_token\n')
hub.clear()
rc, out, err = run(['download', 'mlxcel-test/private'], home)
check('the token file under HF_HOME is used', rc == 0 and hub.log and
      all(r['auth'] == 'Bearer hf_private_token' for r in hub.log), (err, hub.log))
os.remove(os.path.join(home, 'token'))
rc, out, err = run(['download', 'mlxcel-test/gated'], home)
check('gated repo without a token: exit 1 saying gated, with the HF_TOKEN hint',
      rc == 1 and 'gated' in err and 'HTTP 403' in err and 'HF_TOKEN' in err, err)
rc, out, err = run(['download', 'mlxcel-test/nothing-here'], home, {'HF_TOKEN': 'hf_any'})
check('unknown repo with a token: exit 1, not found (404)', rc == 1 and "repository 'mlxcel-test/nothing-here' not found" in err
      and 'HTTP 404' in err, err)
rc, out, err = run(['generate', '-m', 'mlxcel-test/nothing-here', '-p', 'x'], home)
check('unknown repo through -m: exit 1, names the cache folder and the 401',
      rc == 1 and 'models--mlxcel-test--nothing-here' in err and 'HTTP 401' in err, err)
hub.clear()
hub.fail('status', '/api/models/', count=1, status=500)
rc, out, err = run(['download', REPO], home)
check('HTTP 500: exit 1, says the server has a problem', rc == 1 and 'HTTP 500' in err and 'try again later' in err, err)
hub.clear()
closed = socket.socket()
closed.bind(('127.0.0.1', 0))
dead_port = closed.getsockname()[1]
closed.close()
rc, out, err = run(['download', REPO], home, {'HF_ENDPOINT': f'http://127.0.0.1:{dead_port}'})
check('no network: exit 1, "cannot reach" with the HF_HUB_OFFLINE hint',
      rc == 1 and 'cannot reach' in err and 'HF_HUB_OFFLINE' in err, err)
rc, out, err = run(['download', REPO], os.path.join(tmp_root, 'main'), {'HF_ENDPOINT': f'http://127.0.0.1:{dead_port}'})
check('no network but the revision cached: the cached snapshot is used, with a note',
      rc == 0 and out.strip().endswith('/snapshots/' + main_commit) and 'using the cached snapshot' in err, out + err)
for body, want in ((b'<html>not json</html>', 'not a JSON object'), (b'{"siblings": []}', 'no commit id'),
                   (b'{"sha": "' + main_commit.encode() + b'"}', 'no "siblings"'),
                   (b'{"sha": "' + main_commit.encode() + b'", "siblings": [{"name": "x"}]}', 'no "rfilename"')):
    hub.clear()
    hub.fail('raw', '/api/models/', body=body)
    rc, out, err = run(['download', REPO], home)
    check(f'a malformed revision answer is an error naming it ({want})', rc == 1 and want in err, err)
hub.clear()
hub.fail('strip', '/resolve/', count=1, header='X-Repo-Commit')
rc, out, err = run(['download', REPO, '--include', 'config.json'], home)
check('a resolve answer without X-Repo-Commit: "does not look like a Hugging Face Hub"',
      rc == 1 and 'does not look like a Hugging Face Hub' in err, err)
hub.clear()
hub.fail('strip', '/resolve/', count=1, header='X-Linked-Size')
rc, out, err = run(['download', REPO, '--include', 'model.safetensors'], home)
check('an LFS redirect without X-Linked-Size: error naming the missing size', rc == 1 and 'file size' in err, err)
hub.clear()
rc, out, err = run(['download', 'mlxcel-test/evil'], home)
check('a file name escaping the folder is refused', rc == 1 and "'../escape.json'" in err and 'outside' in err, err)
check('... and nothing was written outside', not os.path.exists(os.path.join(home, 'hub', 'escape.json')))
rc, out, err = run(['download', 'not-a-repo-id'], home)
check('a malformed repo id is a usage error', rc == 2 and 'not a Hugging Face repo id' in err, err)
rc, out, err = run(['download', REPO, '--include', '*.bin'], home)
check('--include matching nothing: exit 1 listing the files', rc == 1 and 'no file of' in err and 'config.json' in err, err)
hub.clear()
rc, out, err = run(['download', 'mlxcel-test/old-demo', '--include', 'config.json'], home)
check('a renamed repo is followed (relative redirects)', rc == 0 and
      open(os.path.join(out.strip(), 'config.json'), 'rb').read() == demo_files['config.json'], out + err)

# --- resume after a dropped connection -------------------------------------------------------------------
home = fresh_home('resume')
drop_at = 5_000_000 + 12345
hub.clear()
hub.fail('drop', 'model.safetensors', count=1, offset=drop_at)
rc, out, err = run(['download', REPO, '--include', 'model.safetensors'], home)
blob = os.path.join(repo_dir(home), 'blobs', SAFE_SHA)
resumed = [r for r in hub.requests('cdn', 'GET') if r['range'] and r['range'].startswith(f'bytes={drop_at}-')]
check('a dropped connection is resumed within the run from the byte it stopped at',
      rc == 0 and resumed and sha256_file(blob) == SAFE_SHA, (err, resumed))

home = fresh_home('resume2')
hub.clear()
hub.fail('drop', 'model.safetensors', count=1000, offset=drop_at)
rc, out, err = run(['download', REPO, '--include', 'model.safetensors'], home)
partial = blob = os.path.join(repo_dir(home), 'blobs', SAFE_SHA)
partial = blob + '.incomplete'
size = os.path.getsize(partial) if os.path.exists(partial) else -1
check('a connection that keeps dropping: exit 1, says it broke and to run again',
      rc == 1 and 'broke' in err and 'run again' in err, err)
check('... the partial blob is kept as a valid prefix', 0 < size <= drop_at and
      open(partial, 'rb').read() == SAFE[:size] and not os.path.exists(blob), size)
hub.clear()
rc, out, err = run(['download', REPO, '--include', 'model.safetensors'], home)
first = min((r for r in hub.requests('cdn', 'GET')), key=lambda r: int(r['range'][6:].split('-')[0]), default=None)
check('the next run resumes from the partial file', rc == 0 and first and first['range'].startswith(f'bytes={size}-')
      and 'resuming at' in err and sha256_file(blob) == SAFE_SHA and not os.path.exists(partial), (err, first))

# --- interrupted by a signal: the partial blob is a prefix, the next run resumes ----------------------
home = fresh_home('sigint')
hub.clear()
hub.fail('slow', 'model.safetensors', count=1, delay=0.15)
env = {k: v for k, v in os.environ.items() if not k.startswith('HF_')}
env.update(HF_HOME=home, HF_ENDPOINT=hub.endpoint)
proc = subprocess.Popen([MLXCEL, 'download', REPO, '--include', 'model.safetensors'], env=env,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
partial = os.path.join(repo_dir(home), 'blobs', SAFE_SHA + '.incomplete')
deadline = time.time() + 60
while time.time() < deadline and not (os.path.exists(partial) and os.path.getsize(partial) >= 2 << 20):
    time.sleep(0.02)
proc.send_signal(2)  # SIGINT, as Ctrl-C
proc.wait(timeout=60)
size = os.path.getsize(partial) if os.path.exists(partial) else -1
check('Ctrl-C mid-download leaves a partial blob that is a prefix of the file',
      proc.returncode != 0 and 0 < size < len(SAFE) and open(partial, 'rb').read() == SAFE[:size], (proc.returncode, size))
hub.clear()
rc, out, err = run(['download', REPO, '--include', 'model.safetensors'], home)
check('... and the next run resumes from it', rc == 0 and f'resuming at' in err and
      sha256_file(os.path.join(repo_dir(home), 'blobs', SAFE_SHA)) == SAFE_SHA and
      min(int(r['range'][6:].split('-')[0]) for r in hub.requests('cdn', 'GET')) == size, err)

# --- two downloads of the same repo at once: one fetches, the other waits on the lock ----------------
home = fresh_home('concurrent')
hub.clear()
hub.fail('slow', 'model.safetensors', count=1, delay=0.4)  # the first holds the lock for over a second
procs = [subprocess.Popen([MLXCEL, 'download', REPO, '--include', 'model.safetensors'],
                          env=dict(env, HF_HOME=home), stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
outs = [p.communicate(timeout=120) for p in procs]
served = sum(int(r['range'][6:].split('-')[1]) - int(r['range'][6:].split('-')[0]) + 1 for r in hub.requests('cdn', 'GET'))
check('two concurrent downloads: both succeed, the file is transferred once, one says it waits',
      all(p.returncode == 0 for p in procs) and served == len(SAFE) and
      sum(b'waiting for another download' in e for _, e in outs) == 1 and
      sha256_file(os.path.join(repo_dir(home), 'blobs', SAFE_SHA)) == SAFE_SHA, (served, outs))
hub.clear()

# --- corrupt data ---------------------------------------------------------------------------------------
home = fresh_home('corrupt')
hub.clear()
hub.fail('corrupt', 'model.safetensors', count=1, offset=len(SAFE) // 2)
rc, out, err = run(['download', REPO, '--include', 'model.safetensors'], home)
blob = os.path.join(repo_dir(home), 'blobs', SAFE_SHA)
starts = [r for r in hub.requests('cdn', 'GET') if r['range'] and r['range'].startswith('bytes=0-')]
check('a corrupt byte is detected (sha256), the blob removed and fetched again',
      rc == 0 and 'checksum mismatch' in err and 'fetching it again' in err and len(starts) == 2
      and sha256_file(blob) == SAFE_SHA, (err, starts))
home = fresh_home('corrupt2')
hub.clear()
hub.fail('corrupt', 'model.safetensors', count=1000, offset=len(SAFE) // 2)
rc, out, err = run(['download', REPO, '--include', 'model.safetensors'], home)
blobs_dir = os.path.join(repo_dir(home), 'blobs')
check('data that stays corrupt: exit 1, checksum mismatch, no blob and no partial left',
      rc == 1 and 'checksum mismatch' in err and SAFE_SHA in err and 'removed' in err and os.listdir(blobs_dir) == [],
      (err, os.listdir(blobs_dir)))
hub.clear()

# --- disk full -------------------------------------------------------------------------------------------
home = fresh_home('diskfull')
os.makedirs(os.path.join(repo_dir(home), 'blobs'))
cfg_etag = hs.git_blob_sha1(demo_files['config.json'])
os.symlink('/dev/full', os.path.join(repo_dir(home), 'blobs', cfg_etag + '.incomplete'))
rc, out, err = run(['download', REPO, '--include', 'config.json'], home)
check('disk full: exit 1, says so and names the file', rc == 1 and 'disk full' in err and cfg_etag in err, err)

# --- --local-dir ------------------------------------------------------------------------------------------
home = fresh_home('localdir')
local = os.path.join(home, 'model')
hub.clear()
rc, out, err = run(['download', REPO, '--local-dir', local], home)
meta = open(os.path.join(local, '.cache', 'huggingface', 'download', 'model.safetensors.metadata')).read().split('\n')
check('--local-dir: plain files with the huggingface_hub metadata records',
      rc == 0 and out.strip() == local and not os.path.islink(os.path.join(local, 'model.safetensors'))
      and sha256_file(os.path.join(local, 'model.safetensors')) == SAFE_SHA and meta[0] == main_commit
      and meta[1] == SAFE_SHA and not os.path.exists(os.path.join(home, 'hub')), (out, err, meta))
hub.clear()
rc, out, err = run(['download', REPO, '--local-dir', local], home)
check('--local-dir second run: no content request', rc == 0 and not content_requests() and
      not hub.requests(method='HEAD'), hub.log)
rc, out, err = run(['generate', '-m', local, '-p', 'Hello', '-n', '3', '--temp', '0'], home)
check('the local dir loads as a model folder', rc == 0 and out.startswith(' you are'), out + err)

# --- convert --hf-path from a repo id ----------------------------------------------------------------------
home = fresh_home('convert')
dst = os.path.join(home, 'tiny-q4')
rc, out, err = run(['convert', '--hf-path', 'mlxcel-test/tiny-bf16', '--mlx-path', dst, '-q'], home)
check('convert --hf-path org/name downloads the source and converts it',
      rc == 0 and os.path.isfile(os.path.join(dst, 'config.json')) and 'quantization' in open(os.path.join(dst, 'config.json')).read(),
      out + err)

# --- progress bar on a terminal -----------------------------------------------------------------------------
home = fresh_home('tty')
hub.clear()
hub.fail('slow', 'model.safetensors', count=1, delay=0.1)
env = {k: v for k, v in os.environ.items() if not k.startswith('HF_')}
env.update(HF_HOME=home, HF_ENDPOINT=hub.endpoint)
pid, fd = pty.fork()
if pid == 0:
    os.execve(MLXCEL, [MLXCEL, 'download', REPO, '--include', 'model.safetensors'], env)
chunks, deadline = [], time.time() + 120
while time.time() < deadline:
    r, _, _ = select.select([fd], [], [], 1)
    if not r:
        continue
    try:
        data = os.read(fd, 65536)
    except OSError:
        break
    if not data:
        break
    chunks.append(data)
_, status = os.waitpid(pid, 0)
tty_out = b''.join(chunks).decode('utf-8', 'replace')
check('a progress bar on a terminal (percent, bytes, rate, time left)', os.waitstatus_to_exitcode(status) == 0
      and '\r' in tty_out and '100% [####################] 24.6 MB / 24.6 MB' in tty_out and 'MB/s' in tty_out
      and 's left' in tty_out, tty_out[-600:])

hub.stop()
shutil.rmtree(tmp_root, ignore_errors=True)
finish()
