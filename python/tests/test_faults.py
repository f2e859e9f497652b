"""Workers that die or fail, Ctrl-C, and the interpreter lock."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
import torch.utils.data as tud

import loader

HERE = os.path.dirname(os.path.abspath(__file__))


def ds_of(n=400):
    return tud.TensorDataset(torch.arange(n * 8, dtype=torch.float32).reshape(n, 8), torch.arange(n))


def test_a_worker_killed_mid_epoch_is_restarted_and_the_batches_are_the_same():
    ds = ds_of()
    ref = [b[1].tolist() for b in tud.DataLoader(ds, batch_size=8, shuffle=True,
                                                  generator=torch.Generator().manual_seed(2))]
    dl = loader.DataLoader(ds, batch_size=8, shuffle=True, num_workers=2, max_worker_restarts=2,
                           generator=torch.Generator().manual_seed(2))
    it = iter(dl)
    got = [next(it)[1].tolist() for _ in range(5)]
    os.kill(it.worker_pids()[1], signal.SIGKILL)
    with pytest.warns(UserWarning, match="is killed by signal: Killed. Restarting DataLoader worker 1"):
        got += [b[1].tolist() for b in it]
    assert got == ref
    assert dl.stats()["total"]["restarts"] >= 1


def test_a_worker_killed_without_restarts_raises_naming_it():
    dl = loader.DataLoader(ds_of(), batch_size=8, num_workers=2)
    it = iter(dl)
    next(it)
    pid = it.worker_pids()[0]
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(RuntimeError, match=f"DataLoader worker .*{pid}.*(killed|signal)"):
        for _ in it:
            pass


def test_a_worker_exception_arrives_as_torchs_type_with_the_worker_id():
    ds = tud.Subset(ds_of(10), [0, 1, 2, 25])
    with pytest.raises(IndexError) as ours:
        list(loader.DataLoader(ds, batch_size=2, num_workers=1))
    with pytest.raises(IndexError) as theirs:
        list(tud.DataLoader(ds, batch_size=2, num_workers=1))
    assert str(theirs.value).startswith("Caught IndexError in DataLoader worker process 0.")
    assert str(ours.value).startswith("Caught IndexError in DataLoader worker process 0.")
    assert "out of" in str(ours.value)


CTRL_C = textwrap.dedent("""
    import os, signal, sys, time, torch, torch.utils.data as tud
    import loader
    ds = tud.TensorDataset(torch.randn(64, 4))
    dl = loader.DataLoader(ds, batch_size=4, num_workers=2)
    it = iter(dl)
    next(it)
    pids = it.worker_pids()
    for p in pids:
        os.kill(p, signal.SIGSTOP)   # after the prefetched batches, next() waits for ever
    print("PIDS", *pids, flush=True)
    try:
        while True:
            next(it)
    except KeyboardInterrupt:
        print("INTERRUPTED", time.monotonic(), flush=True)
""")


def test_ctrl_c_while_next_waits_raises_keyboard_interrupt_and_leaves_nothing(tmp_path):
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C)  # time.monotonic() is one clock for both processes
    shm_before = set(os.listdir("/dev/shm"))
    env = dict(os.environ)
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    line = p.stdout.readline()
    assert line.startswith("PIDS"), line + p.stderr.read()
    pids = [int(x) for x in line.split()[1:]]
    time.sleep(0.3)  # next() is waiting now
    sent = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert "INTERRUPTED" in out, out + err
    latency = float(out.split("INTERRUPTED")[1].split()[0]) - sent
    print(f"Ctrl-C to KeyboardInterrupt: {latency * 1000:.1f} ms")
    assert latency < 1.0  # the goal is 100 ms (the check runs every 20 ms); generous for a loaded machine
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z", pid
    assert set(os.listdir("/dev/shm")) - shm_before == set()


def test_the_gil_is_released_while_next_waits():
    ds = ds_of(64)
    dl = loader.DataLoader(ds, batch_size=4, num_workers=1)
    it = iter(dl)
    next(it)
    pid = it.worker_pids()[0]
    counts = {"n": 0}
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            counts["n"] += 1

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.2)
    c0 = counts["n"]
    time.sleep(0.2)
    alone = counts["n"] - c0  # spinning while the main thread sleeps
    os.kill(pid, signal.SIGSTOP)

    def wake():
        time.sleep(0.5)
        os.kill(pid, signal.SIGCONT)

    threading.Thread(target=wake).start()
    c1 = counts["n"]
    t1 = time.monotonic()
    for _ in range(4):  # the prefetched batches, then a wait for the stopped worker
        next(it)
    waited = time.monotonic() - t1
    during = (counts["n"] - c1) / waited * 0.2
    stop.set()
    t.join()
    list(it)
    assert waited > 0.2
    assert during > 0.3 * alone, (during, alone)
