//! Azure AD authentication to PostgreSQL (`--store postgres://role@host/db?azure_ad=true`), as far
//! as it runs without the internet: the server's `[azure]` credential is the real managed-identity
//! credential of `azure_identity` (App Service flavour: `IDENTITY_ENDPOINT` / `IDENTITY_HEADER`),
//! pointed at a token endpoint this test serves on loopback, and PostgreSQL is configured to take
//! that token as the role's password (as Azure Database for PostgreSQL takes an Azure AD token).
//! What is not covered: Microsoft's token service itself and Azure Database for PostgreSQL's check
//! of the token's signature (here it is a password like any other).
//!
//! Needs `SPILLWAY_TEST_POSTGRES` (set by `.ci/with-postgres`, which makes roles `spillway_pw` and
//! `spillway_aad` give a password over TCP); skipped with a note otherwise.

mod e2e_support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use e2e_support::{Server, client, quick_job, temp_dir};

/// What the server asks the token endpoint: each request's first line and its identity header.
type Asked = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// An App Service-style managed identity endpoint on loopback that hands out `token`.
fn token_endpoint(token: Arc<Mutex<String>>) -> (String, Asked) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/msi/token", listener.local_addr().unwrap());
    let asked: Asked = Arc::default();
    let seen = asked.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut first = String::new();
            let _ = reader.read_line(&mut first);
            let mut header = None;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = line.split_once(':')
                    && k.eq_ignore_ascii_case("x-identity-header")
                {
                    header = Some(v.trim().to_string());
                }
            }
            seen.lock().unwrap().push((first.trim().to_string(), header));
            // Expires soon: the credential's cache then fetches a fresh token for each connection.
            let expires = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 90;
            let body = format!(
                r#"{{"access_token":"{}","expires_on":"{expires}","token_type":"Bearer","resource":"https://ossrdbms-aad.database.windows.net"}}"#,
                token.lock().unwrap()
            );
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, asked)
}

fn admin_sql(admin: &str, sql: &str) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (c, conn) = tokio_postgres::connect(admin, tokio_postgres::NoTls).await.expect("test server");
        tokio::spawn(conn);
        c.batch_execute(sql).await.unwrap();
    });
}

#[test]
fn a_managed_identity_token_is_the_password_and_is_fetched_for_each_new_connection() {
    let Ok(admin) = std::env::var("SPILLWAY_TEST_POSTGRES") else {
        eprintln!("skipping postgres_azure_ad: SPILLWAY_TEST_POSTGRES is not set (see .ci/with-postgres)");
        return;
    };
    let first_token = format!("eyJ0eXAi.test-token-{}", std::process::id());
    let db = format!("spw_aad_{}", std::process::id());
    // One statement at a time: (CREATE|DROP) DATABASE refuse to run in a multi-statement transaction.
    admin_sql(&admin, &format!("DROP DATABASE IF EXISTS {db}"));
    admin_sql(&admin, "DROP ROLE IF EXISTS spillway_aad");
    admin_sql(&admin, &format!("CREATE ROLE spillway_aad LOGIN PASSWORD '{first_token}'"));
    admin_sql(&admin, &format!("CREATE DATABASE {db} OWNER spillway_aad"));
    let host = admin.split('@').nth(1).unwrap().split('/').next().unwrap();
    // A server that lets the role in without its password (a cluster not made by .ci/with-postgres)
    // cannot tell a right token from a wrong one: say so and stop, rather than start a server that
    // should have been refused and wait for it forever.
    let probe = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let wrong = format!("postgres://spillway_aad:wrong@{host}/{db}?connect_timeout=5");
    if probe.block_on(tokio_postgres::connect(&wrong, tokio_postgres::NoTls)).is_ok() {
        eprintln!(
            "skipping postgres_azure_ad: the test server does not ask spillway_aad for a password (see .ci/with-postgres)"
        );
        return;
    }
    let store = format!("postgres://spillway_aad@{host}/{db}?azure_ad=true&connect_timeout=5");
    let token = Arc::new(Mutex::new(first_token.clone()));
    let (endpoint, asked) = token_endpoint(token.clone());
    let dir = temp_dir("pg-aad");
    let config = dir.join("spillway.toml");
    std::fs::write(
        &config,
        "[azure]\nsubscription_id = \"00000000-0000-0000-0000-000000000000\"\nresource_group = \"spillway-test\"\n\
         credential = \"managed_identity\"\n",
    )
    .unwrap();
    let env =
        [("IDENTITY_ENDPOINT", endpoint.as_str()), ("IDENTITY_HEADER", "header-secret"), ("SPILLWAY_LOG", "info")];

    // A token the database does not take: one clear line, exit 1, the token never shown.
    *token.lock().unwrap() = "not-the-password".into();
    let out = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config", config.to_str().unwrap(), "--store", &store])
        .arg("--data-dir")
        .arg(dir.join("refused"))
        .envs(env)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("password authentication failed for user \"spillway_aad\""), "{err}");
    assert!(!err.contains("not-the-password"), "the token was shown: {err}");
    {
        let asked = asked.lock().unwrap();
        let (line, header) = asked.first().expect("the token endpoint was asked");
        assert!(line.contains("resource=https%3A%2F%2Fossrdbms-aad.database.windows.net"), "{line}");
        assert_eq!(header.as_deref(), Some("header-secret"));
    }

    // The right token: the server serves on the database, acknowledges a submission.
    *token.lock().unwrap() = first_token.clone();
    let server =
        Server::start(&dir, &dir.join("data"), 1, &["--config", config.to_str().unwrap(), "--store", &store], &env);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let r = client()
            .post(format!("{}/v1/jobs", server.url))
            .bearer_auth(&server.admin)
            .json(&quick_job("over-aad", "aad"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{:?}\n{}", r.text().await, server.logs());
    });
    // The token rotates (Azure AD tokens last about an hour): the role's password changes, the old
    // connections end; new ones must present the new token, fetched afresh.
    let second_token = format!("eyJ0eXAi.rotated-{}", std::process::id());
    *token.lock().unwrap() = second_token.clone();
    let before = asked.lock().unwrap().len();
    admin_sql(&admin, &format!("ALTER ROLE spillway_aad PASSWORD '{second_token}'"));
    admin_sql(&admin, &format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db}'"));
    rt.block_on(async {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let r = client()
                .post(format!("{}/v1/jobs", server.url))
                .bearer_auth(&server.admin)
                .json(&quick_job("after-rotation", "aad"))
                .send()
                .await
                .unwrap();
            if r.status() == 201 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "no recovery after rotation: {}", server.logs());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    assert!(asked.lock().unwrap().len() > before, "no fresh token was fetched for the new connections");
    let logs = server.logs();
    assert!(!logs.contains(&first_token) && !logs.contains(&second_token), "a token was logged:\n{logs}");
    drop(server);
    admin_sql(&admin, &format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
}
