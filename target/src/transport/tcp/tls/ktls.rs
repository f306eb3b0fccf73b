//! Hands a connection whose TLS handshake is done to the kernel's TLS layer
//! (kTLS, the `tls` module): from here on the socket's sends are sealed and
//! its receives opened by the kernel, so the worker's io_uring reads and
//! writes NVMe/TCP PDUs on it as on any socket. A record that is not
//! application data (an alert, a key update) fails the receive, and the
//! connection ends.

use std::os::fd::{AsRawFd, BorrowedFd};

use libc::{tls12_crypto_info_aes_gcm_128, tls12_crypto_info_aes_gcm_256};
use tlspsk::PskHash;
use zeroize::Zeroize;

use super::keys::TrafficKeys;

/// Why the kernel did not take the connection.
#[derive(Debug, thiserror::Error)]
pub enum KtlsError {
    /// No TLS upper layer protocol in this kernel (the `tls` module).
    #[error("the kernel's TLS layer is not available (modprobe tls): {0}")]
    NoTls(std::io::Error),
    /// A key was refused.
    #[error("the kernel's TLS layer refused the {0} keys: {1}")]
    Keys(&'static str, std::io::Error),
}

/// Puts `fd` under kTLS with `tx` (what it sends) and `rx` (what it reads).
pub fn install(
    fd: BorrowedFd<'_>,
    hash: PskHash,
    tx: &TrafficKeys,
    rx: &TrafficKeys,
) -> Result<(), KtlsError> {
    let ulp = b"tls\0";
    // SAFETY: a live socket and a NUL-terminated name of its length.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_ULP,
            ulp.as_ptr().cast(),
            ulp.len() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(KtlsError::NoTls(std::io::Error::last_os_error()));
    }
    set_keys(fd, hash, libc::TLS_TX, tx).map_err(|e| KtlsError::Keys("send", e))?;
    set_keys(fd, hash, libc::TLS_RX, rx).map_err(|e| KtlsError::Keys("receive", e))?;
    // TLS 1.3 records may carry padding, so the kernel decrypts each into
    // its own buffer and copies it out, unless told to expect none: then it
    // decrypts straight into the reader's buffer (a write's pool buffer),
    // and a padded record is decrypted again the slow way. Linux hosts send
    // none. Older kernels (before 6.0) lack the option: the copy stays.
    if let Err(e) = setsockopt(fd, libc::TLS_RX_EXPECT_NO_PAD, &1u32) {
        tracing::debug!(error = %e, "kTLS: no zero-copy decryption (TLS_RX_EXPECT_NO_PAD)");
    }
    Ok(())
}

fn set_keys(
    fd: BorrowedFd<'_>,
    hash: PskHash,
    dir: libc::c_int,
    k: &TrafficKeys,
) -> std::io::Result<()> {
    let info = libc::tls_crypto_info {
        version: libc::TLS_1_3_VERSION,
        cipher_type: match hash {
            PskHash::Sha256 => libc::TLS_CIPHER_AES_GCM_128,
            PskHash::Sha384 => libc::TLS_CIPHER_AES_GCM_256,
        },
    };
    let (salt, iv) = k.iv.split_at(4);
    // The two suites' structures differ only in the key's length.
    macro_rules! give {
        ($t:ident) => {{
            let mut c = $t {
                info,
                iv: iv.try_into().unwrap_or_default(),
                key: k.key.as_slice().try_into().unwrap_or_default(),
                salt: salt.try_into().unwrap_or_default(),
                rec_seq: k.seq.to_be_bytes(),
            };
            let r = setsockopt(fd, dir, &c);
            c.key.zeroize();
            c.iv.zeroize();
            c.salt.zeroize();
            r
        }};
    }
    match hash {
        PskHash::Sha256 => give!(tls12_crypto_info_aes_gcm_128),
        PskHash::Sha384 => give!(tls12_crypto_info_aes_gcm_256),
    }
}

fn setsockopt<T>(fd: BorrowedFd<'_>, dir: libc::c_int, v: &T) -> std::io::Result<()> {
    // SAFETY: a live socket, and a value of the size given that the kernel
    // only reads.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_TLS,
            dir,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}
