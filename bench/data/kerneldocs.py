"""The Linux kernel's own documentation (Debian package `linux-doc-6.1`) for `bench.answers --set kernel`.

Document: one reStructuredText file of the kernel's Documentation/ tree, as the package installs
it (`*.rst.gz`), decompressed and kept as is (markup and all), after a first line naming the file.
`answer_corpus_docs` gives the fixed list `ANSWER_DOCS`: sysctl references (`/proc/sys/kernel`,
`vm`, `fs`, `net`, the IPv4/IPv6, IPVS, conntrack and MPTCP variables), administrator guides,
memory-management, filesystem, networking, scheduler, block and power-management pages, mid-sized
ones (about 740 KB of text in all; `filesystems/proc.rst` and `cgroup-v2.rst` are left out for
their size). The questions of `bench/data/kernel_questions.json` ask for details of these pages
(sysctl defaults, file names under /proc and /sys, flag and option names, limits and units) that a
small chat model cannot know from its training.
"""

from __future__ import annotations

import gzip
from pathlib import Path

PACKAGE = "linux-doc-6.1"
PACKAGE_HINT = f"sudo apt-get install {PACKAGE}"
DOC_DIR = Path(f"/usr/share/doc/{PACKAGE}/Documentation")


class KernelDocsMissing(FileNotFoundError):
    pass


# Paths relative to Documentation/. A fixed list, not a draw, so that the corpus the questions were
# written from stays the same; a page without a question is a distractor.
ANSWER_DOCS = (
    "admin-guide/sysctl/kernel.rst", "admin-guide/sysctl/vm.rst", "admin-guide/sysctl/fs.rst",
    "admin-guide/sysctl/net.rst",
    "networking/ip-sysctl.rst", "networking/ipvs-sysctl.rst", "networking/nf_conntrack-sysctl.rst",
    "networking/mptcp-sysctl.rst",
    "admin-guide/sysrq.rst", "admin-guide/tainted-kernels.rst", "admin-guide/binfmt-misc.rst",
    "admin-guide/ramoops.rst", "admin-guide/iostats.rst", "admin-guide/dynamic-debug-howto.rst",
    "admin-guide/bootconfig.rst", "admin-guide/module-signing.rst", "admin-guide/kdump/kdump.rst",
    "admin-guide/blockdev/zram.rst", "admin-guide/nfs/nfsroot.rst", "admin-guide/pm/sleep-states.rst",
    "admin-guide/mm/ksm.rst", "admin-guide/mm/zswap.rst", "admin-guide/mm/transhuge.rst",
    "admin-guide/mm/hugetlbpage.rst", "mm/slub.rst",
    "filesystems/tmpfs.rst", "filesystems/vfat.rst", "filesystems/squashfs.rst", "filesystems/erofs.rst",
    "filesystems/overlayfs.rst", "filesystems/ext2.rst", "filesystems/debugfs.rst", "filesystems/sysfs.rst",
    "networking/tuntap.rst", "networking/netconsole.rst", "networking/scaling.rst", "networking/pktgen.rst",
    "networking/vrf.rst", "networking/tls.rst", "networking/msg_zerocopy.rst",
    "scheduler/sched-bwc.rst", "scheduler/sched-rt-group.rst", "block/bfq-iosched.rst", "power/swsusp.rst",
)


def answer_corpus_docs(docs: tuple[str, ...] = ANSWER_DOCS) -> list[str]:
    """The text of each document of `docs` (paths under Documentation/, without `.gz`), in order,
    each after a line naming its file."""
    if not DOC_DIR.is_dir():
        raise KernelDocsMissing(f"{DOC_DIR} not found ({PACKAGE_HINT})")
    paths = [DOC_DIR / f"{doc}.gz" for doc in docs]
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise KernelDocsMissing(f"kernel documentation not found ({PACKAGE_HINT}): {', '.join(missing)}")
    texts = []
    for doc, path in zip(docs, paths, strict=True):
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
            texts.append(f"Documentation/{doc}\n\n{handle.read()}")
    return texts
