//! A business transaction's client-side hold that lasts as long on a tokio runtime as on a
//! thread.
//!
//! `tokio::time::sleep` rounds its deadline up to the timer wheel's next millisecond tick, and
//! the runtime parks for whole milliseconds: a 2 ms sleep lasts about 3 ms, a 500 µs one
//! anywhere from 1 to 2 ms depending on where the tick falls. A benchmark that compares a tokio
//! client's transactions with a thread's (`std::thread::sleep`, 2.05–2.1 ms) or pgbench's
//! (`\sleep`, a `ppoll` timeout) would then hold the async face's row locks for a different
//! time than the others'. [`Hold`] arms a Linux `timerfd` for the exact duration and awaits it
//! through tokio's reactor: the task still yields its worker thread while it waits, as a
//! `tokio::time::sleep` does, and wakes when the kernel's high-resolution timer fires.
//! (Elsewhere than Linux it falls back to `tokio::time::sleep`, and the benchmark's hold note
//! shows how long that lasts.)

use std::io;
use std::time::{Duration, Instant};

#[cfg(target_os = "linux")]
pub use timerfd::Hold;

#[cfg(not(target_os = "linux"))]
/// One task's hold timer: `tokio::time::sleep`, without Linux's `timerfd`.
#[derive(Debug)]
pub struct Hold;

#[cfg(not(target_os = "linux"))]
impl Hold {
    /// A timer.
    pub fn new() -> io::Result<Self> {
        Ok(Hold)
    }

    /// `tokio::time::sleep(duration)`.
    pub async fn sleep(&mut self, duration: Duration) -> io::Result<()> {
        tokio::time::sleep(duration).await;
        Ok(())
    }
}

#[cfg(target_os = "linux")]
mod timerfd {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Duration;

    use tokio::io::unix::AsyncFd;
    use tokio::io::Interest;

    /// One task's hold timer: a non-blocking `timerfd` registered with the runtime's reactor,
    /// armed anew by every [`Hold::sleep`]. Make it inside the runtime.
    #[derive(Debug)]
    pub struct Hold {
        timer: AsyncFd<OwnedFd>,
    }

    impl Hold {
        /// A disarmed timer on `CLOCK_MONOTONIC`.
        pub fn new() -> io::Result<Self> {
            // SAFETY: plain system call; a non-negative return value is a new descriptor we own.
            let fd = unsafe {
                libc::timerfd_create(
                    libc::CLOCK_MONOTONIC,
                    libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: `fd` was just created and nothing else owns it.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            // SAFETY: the `OwnedFd` keeps the descriptor open, the same one, for as long as the
            // `AsyncFd` owns it.
            let timer = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE)? };
            Ok(Hold { timer })
        }

        /// Waits `duration` without holding a worker thread. Arming the timer again discards an
        /// expiry a dropped earlier sleep left unread, so a cut-off sleep does not shorten the next.
        pub async fn sleep(&mut self, duration: Duration) -> io::Result<()> {
            if duration.is_zero() {
                return Ok(());
            }
            let spec = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    tv_sec: duration.as_secs() as libc::time_t,
                    tv_nsec: duration.subsec_nanos() as libc::c_long,
                },
            };
            let fd = self.timer.get_ref().as_raw_fd();
            // SAFETY: `fd` is our timerfd; `spec` is a valid itimerspec; no old value is asked for.
            if unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) } < 0 {
                return Err(io::Error::last_os_error());
            }
            loop {
                let mut ready = self.timer.readable().await?;
                let read = ready.try_io(|timer| {
                    let mut expirations = [0u8; 8];
                    // SAFETY: reads at most 8 bytes into an 8-byte buffer from our descriptor.
                    let n = unsafe {
                        libc::read(
                            timer.get_ref().as_raw_fd(),
                            expirations.as_mut_ptr().cast(),
                            expirations.len(),
                        )
                    };
                    if n < 0 {
                        Err(io::Error::last_os_error())
                    } else {
                        Ok(())
                    }
                });
                match read {
                    Ok(result) => return result,
                    // A stale readiness (the timer was re-armed since): wait for the real expiry.
                    Err(_would_block) => continue,
                }
            }
        }
    }
}

/// The median time, in milliseconds, that `n` holds of `duration` take on the current runtime.
pub async fn median_hold_ms(duration: Duration, n: usize) -> io::Result<f64> {
    let mut hold = Hold::new()?;
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        hold.sleep(duration).await?;
        times.push(started.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times.get(n / 2).copied().unwrap_or(f64::NAN))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::Hold;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    }

    #[test]
    fn a_hold_never_ends_early() {
        runtime().block_on(async {
            let mut hold = Hold::new().unwrap();
            for micros in [1, 300, 2_000, 5_000] {
                let duration = Duration::from_micros(micros);
                let started = Instant::now();
                hold.sleep(duration).await.unwrap();
                assert!(started.elapsed() >= duration, "{micros} µs ended early");
            }
        });
    }

    #[test]
    fn a_cut_off_hold_does_not_shorten_the_next() {
        runtime().block_on(async {
            let mut hold = Hold::new().unwrap();
            // Armed, polled once, then dropped: its expiry 1 ms later lies unread in the timer.
            let finished = tokio::select! {
                biased;
                _ = hold.sleep(Duration::from_millis(1)) => true,
                () = std::future::ready(()) => false,
            };
            assert!(!finished, "a 1 ms hold finished on its first poll");
            std::thread::sleep(Duration::from_millis(3));
            let started = Instant::now();
            hold.sleep(Duration::from_millis(5)).await.unwrap();
            assert!(
                started.elapsed() >= Duration::from_millis(5),
                "the stale expiry ended the hold"
            );
        });
    }
}
