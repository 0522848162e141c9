"""Platform facts: OS name, kernel release, python version, hostname (through the Host seam)."""

from __future__ import annotations

from loaderdoc.system.facts import PlatformFacts, Reading
from loaderdoc.system.host import Host


def read_platform(host: Host) -> PlatformFacts:
    info = host.platform()
    missing = Reading.missing("not reported")
    return PlatformFacts(
        system=info.get("system", missing),
        kernel=info.get("kernel", missing),
        python=info.get("python", missing),
        hostname=info.get("hostname", missing),
    )
