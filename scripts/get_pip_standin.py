"""Stand-in for get-pip.py, which ansible-test downloads from a host this machine cannot
reach: bootstrap the interpreter's bundled pip with ensurepip, then pip-install what
ansible-test asked for (from the package index, which is reachable)."""
import subprocess
import sys


def main() -> None:
    """Install pip with ensurepip, then the requested packages."""
    args = [a for a in sys.argv[1:] if a not in ('--no-setuptools', '--no-wheel')]
    subprocess.check_call([sys.executable, '-m', 'ensurepip'])
    subprocess.check_call([sys.executable, '-m', 'pip', 'install'] + args)


if __name__ == '__main__':
    main()
