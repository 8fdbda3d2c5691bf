//! A TCP proxy on loopback in front of a real server, for outages a test can cause and end:
//! [`Proxy::cut`] closes every proxied connection and refuses new ones (each accepted, then
//! closed at once, as a server that went away); [`Proxy::restore`] forwards again. Only the
//! proxy's own sockets are touched, never the server's sessions of others.
//! (Shared with `examples/examples/buffer_outage.rs` through `#[path]`; std only.)

#![allow(dead_code)] // each includer uses a part

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

#[derive(Default)]
struct State {
    down: AtomicBool,
    closing: AtomicBool,
    /// Both ends of every proxied connection, to cut them.
    sockets: Mutex<Vec<TcpStream>>,
}

/// The proxy; dropping it stops it and closes its connections.
pub struct Proxy {
    port: u16,
    state: Arc<State>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// A proxy in front of the server of `url` (`scheme://[user@]host:port/…`).
    pub fn start(url: &str) -> Proxy {
        let upstream = authority(url).to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        let acceptor = {
            let state = Arc::clone(&state);
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    if state.closing.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(client) = client else { continue };
                    if state.down.load(Ordering::SeqCst) {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    }
                    let Ok(server) = TcpStream::connect(&upstream) else {
                        continue;
                    };
                    let _ = (client.set_nodelay(true), server.set_nodelay(true));
                    let mut sockets = state.sockets.lock().unwrap();
                    for (from, to) in [(&client, &server), (&server, &client)] {
                        let (mut from, mut to) =
                            (from.try_clone().unwrap(), to.try_clone().unwrap());
                        std::thread::spawn(move || pump(&mut from, &mut to));
                    }
                    sockets.extend([client, server]);
                }
            })
        };
        Proxy {
            port,
            state,
            acceptor: Some(acceptor),
        }
    }

    /// `url` with its host and port replaced by the proxy's.
    pub fn url(&self, url: &str) -> String {
        url.replacen(authority(url), &format!("127.0.0.1:{}", self.port), 1)
    }

    /// The outage begins: every proxied connection is closed, new ones are closed on accept.
    pub fn cut(&self) {
        self.state.down.store(true, Ordering::SeqCst);
        for socket in self.state.sockets.lock().unwrap().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }

    /// The outage ends: new connections reach the server again.
    pub fn restore(&self) {
        self.state.down.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
        self.state.closing.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wakes the acceptor
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn pump(from: &mut TcpStream, to: &mut TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = (from.shutdown(Shutdown::Both), to.shutdown(Shutdown::Both));
}

/// The `host:port` of a URL.
fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    rest.split(['/', '?']).next().unwrap_or(rest)
}
