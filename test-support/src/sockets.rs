//! The raw TCP sockets the tests need and the standard library does not make: a client bound to
//! a chosen source address ([`connect_from`]: another loopback address stands for another
//! host), one whose close resets ([`reset_on_close`]), and a port held with `SO_REUSEPORT`
//! ([`reuseport_socket`]: a receiver that goes down and comes back on its port).

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `sockaddr_in` of `ip:port`.
fn sockaddr(ip: Ipv4Addr, port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// Bytes of a `T`, for the system calls that take a length.
fn len_of<T>() -> libc::socklen_t {
    std::mem::size_of::<T>() as libc::socklen_t
}

/// A new IPv4 TCP socket.
fn tcp_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes integers; the descriptor is owned by the OwnedFd made at once.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `Ok` when a system call returned 0, else the error it left.
fn check(rc: libc::c_int) -> io::Result<()> {
    match rc {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Sets the socket option `name` of `level` of `fd` to `value`.
fn set_option<T>(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    let value = (value as *const T).cast();
    // SAFETY: setsockopt(2) reads `size_of::<T>()` bytes from `value`, borrowed for the call,
    // on a descriptor `fd` holds open.
    check(unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, value, len_of::<T>()) })
}

/// Binds `fd` to `addr`.
fn bind(fd: &OwnedFd, addr: &libc::sockaddr_in) -> io::Result<()> {
    let addr = (addr as *const libc::sockaddr_in).cast();
    // SAFETY: bind(2) reads the sockaddr_in `addr` of the given size; `fd` is open.
    check(unsafe { libc::bind(fd.as_raw_fd(), addr, len_of::<libc::sockaddr_in>()) })
}

/// A TCP connection to `addr` (IPv4) from the local address `from`.
pub fn connect_from(from: Ipv4Addr, addr: SocketAddr) -> io::Result<TcpStream> {
    let SocketAddr::V4(to) = addr else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an IPv4 address",
        ));
    };
    let fd = tcp_socket()?;
    bind(&fd, &sockaddr(from, 0))?;
    let remote = sockaddr(*to.ip(), to.port());
    let remote_ptr = (&remote as *const libc::sockaddr_in).cast();
    let len = len_of::<libc::sockaddr_in>();
    // SAFETY: connect(2) reads the sockaddr_in `remote` of the given size; `fd` is open.
    check(unsafe { libc::connect(fd.as_raw_fd(), remote_ptr, len) })?;
    Ok(TcpStream::from(fd))
}

/// Makes closing `c` reset the connection (`SO_LINGER` 0) instead of leaving it in TIME_WAIT
/// for a minute: a flood's hundred thousand connections would otherwise hold the ephemeral
/// ports of their source addresses, and a test binding `0.0.0.0` to a port found free on
/// 127.0.0.1 would then find it taken.
pub fn reset_on_close(c: &TcpStream) -> io::Result<()> {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    set_option(c, libc::SOL_SOCKET, libc::SO_LINGER, &linger)
}

/// A TCP socket with `SO_REUSEPORT` bound to 127.0.0.1:`port` (0: a free one), listening or
/// not: another socket of this user with `SO_REUSEPORT` can bind the port while it is held,
/// no socket without can.
pub fn reuseport_socket(port: u16, listen: bool) -> io::Result<OwnedFd> {
    let fd = tcp_socket()?;
    set_option(
        &fd,
        libc::SOL_SOCKET,
        libc::SO_REUSEPORT,
        &(1 as libc::c_int),
    )?;
    bind(&fd, &sockaddr(Ipv4Addr::LOCALHOST, port))?;
    if listen {
        // SAFETY: listen(2) takes integers, on the descriptor `fd` holds open.
        check(unsafe { libc::listen(fd.as_raw_fd(), 128) })?;
    }
    Ok(fd)
}
