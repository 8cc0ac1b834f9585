use std::os::unix::fs::PermissionsExt;

use super::SecurityArgs;
use crate::server::auth::{Credentials, Role};

fn token() -> Credentials {
    let mut credentials = Credentials::none();
    credentials.add(Some(Role::Write), "w", "test").unwrap();
    credentials
}

#[test]
fn an_http_listener_other_machines_reach_is_warned_about_without_a_token_or_tls() {
    let args = SecurityArgs::default();
    let none = Credentials::none();
    assert!(args
        .startup_warnings("127.0.0.1:8080".parse().unwrap(), &none)
        .is_empty());
    assert!(args
        .startup_warnings("[::1]:8080".parse().unwrap(), &none)
        .is_empty());

    let open = args.startup_warnings("0.0.0.0:8080".parse().unwrap(), &none);
    assert_eq!(open.len(), 1, "{open:?}");
    for part in [
        "--http 0.0.0.0:8080",
        "no token",
        "read, write and delete",
        "--token-file",
        "--http 127.0.0.1:8080",
    ] {
        assert!(open[0].contains(part), "{part:?} not in {}", open[0]);
    }
    let allowed = SecurityArgs {
        http_allow: vec!["10.0.0.0/8".into()],
        ..SecurityArgs::default()
    };
    let warned = allowed.startup_warnings("10.1.2.3:8080".parse().unwrap(), &none);
    assert!(warned[0].contains("--http-allow admits"), "{warned:?}");

    let clear = args.startup_warnings("[::]:8080".parse().unwrap(), &token());
    assert_eq!(clear.len(), 1, "{clear:?}");
    assert!(
        clear[0].contains("clear text") && clear[0].contains("--tls-cert"),
        "{}",
        clear[0]
    );

    let tls = SecurityArgs {
        tls_cert: Some("cert.pem".into()),
        ..SecurityArgs::default()
    };
    assert!(tls
        .startup_warnings("0.0.0.0:8443".parse().unwrap(), &token())
        .is_empty());
}

#[test]
fn token_files_and_the_tls_key_every_user_can_read_are_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let (tokens, key) = (dir.path().join("write.token"), dir.path().join("key.pem"));
    std::fs::write(&tokens, "w\n").unwrap();
    std::fs::write(&key, "key\n").unwrap();
    let args = SecurityArgs {
        write_token_file: Some(tokens.clone()),
        tls_key: Some(key.clone()),
        ..SecurityArgs::default()
    };
    let local = "127.0.0.1:8080".parse().unwrap();
    let mode = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    mode(&tokens, 0o644);
    mode(&key, 0o604);
    let warned = args.startup_warnings(local, &token());
    assert_eq!(warned.len(), 2, "{warned:?}");
    assert!(
        warned[0].starts_with(&format!("--write-token-file {}", tokens.display()))
            && warned[0].contains("mode 0644")
            && warned[0].contains("chmod 600"),
        "{}",
        warned[0]
    );
    assert!(warned[1].starts_with("--tls-key "), "{}", warned[1]);
    // Private to its owner, or shared with a group only: nothing to say.
    mode(&tokens, 0o600);
    mode(&key, 0o640);
    assert!(args.startup_warnings(local, &token()).is_empty());
}
