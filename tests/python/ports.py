"""A TCP port free now, for a test's torch.distributed rendezvous (MASTER_PORT), drawn below the
system's ephemeral range: the system hands out ports from that range as the local ends of
outgoing connections (other tests' Gloo connections among them), so a port it gave as free
(bind to 0) could be taken by one of those before the test's store binds it. Free when drawn;
another program binding it before the store does is the one race left. Run as a script, prints
one (torchrun.sh)."""
import random
import socket


def free_port():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = random.randrange(20000, max(low, 20001))
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in 20000..{low}")


if __name__ == "__main__":
    try:
        print(free_port())
    except RuntimeError as e:
        raise SystemExit(f"torchrun.sh: {e}")
