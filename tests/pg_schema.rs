//! The PostgreSQL queue database, against a real server: `tessera
//! migrate` (its dry run, a run, a second run, two at once, a newer
//! schema, a database that commits asynchronously, bad URLs), and the
//! grants rules rendered as SQL giving the Rust predicate's answers over
//! random grants and tasks.

use crate::support;

use std::collections::HashSet;
use std::process::{Command, Output};

use proptest::prelude::*;
use support::pg;
use tessera::database::schema;
use tessera::queue::pg::viewer::{self, Grants};
use tessera::store::Name;
use tessera::store::envelope::{EffectClass, Envelope, TaskFacts, Viewer, Visibility};

fn migrate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("migrate")
        .args(args)
        .env_remove("TESSERA_QUEUE_URL")
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

async fn recorded_versions(url: &str) -> Vec<i32> {
    pg::connect(url)
        .await
        .query("SELECT version FROM tessera_schema ORDER BY version", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test]
async fn a_dry_run_shows_what_would_run_and_a_run_applies_it_once() {
    let url = pg::fresh_database().await;
    let dry = migrate(&["--queue-url", &url, "--dry-run"]);
    assert_eq!(dry.status.code(), Some(2), "{}", text(&dry));
    assert!(
        text(&dry).contains("schema at version 0 of"),
        "{}",
        text(&dry)
    );
    assert!(
        text(&dry).contains("would apply    1  the queue's tables"),
        "{}",
        text(&dry)
    );
    let tables: i64 = pg::connect(&url)
        .await
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "a dry run wrote nothing");

    let run = migrate(&["--queue-url", &url]);
    assert!(run.status.success(), "{}", text(&run));
    assert!(
        text(&run).contains("applied    1  the queue's tables"),
        "{}",
        text(&run)
    );
    let latest: Vec<i32> = (1..=schema::latest()).collect();
    assert_eq!(recorded_versions(&url).await, latest);

    let again = migrate(&["--queue-url", &url]);
    assert!(again.status.success(), "{}", text(&again));
    assert!(!text(&again).contains("applied"), "{}", text(&again));
    let dry = migrate(&["--queue-url", &url, "--dry-run"]);
    assert_eq!(dry.status.code(), Some(0), "{}", text(&dry));
    assert!(text(&dry).contains("nothing to apply"), "{}", text(&dry));
    assert_eq!(recorded_versions(&url).await, latest);
}

#[tokio::test]
async fn the_url_can_come_from_the_environment() {
    let url = pg::fresh_database().await;
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["migrate", "--dry-run"])
        .env("TESSERA_QUEUE_URL", &url)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("would apply"), "{}", text(&out));
}

#[tokio::test]
async fn daemons_migrating_at_once_migrate_once() {
    let url = pg::fresh_database().await;
    let runs: Vec<_> = (0..4)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_tessera"))
                .args(["migrate", "--queue-url", &url])
                .output()
        })
        .collect();
    // The four processes above ran one after another; these run together.
    let together: Vec<_> = (0..4)
        .map(|_| {
            let url = pg::fresh_database();
            async move {
                let url = url.await;
                let children: Vec<_> = (0..4)
                    .map(|_| {
                        Command::new(env!("CARGO_BIN_EXE_tessera"))
                            .args(["migrate", "--queue-url", &url])
                            .stdout(std::process::Stdio::piped())
                            .stderr(std::process::Stdio::piped())
                            .spawn()
                            .unwrap()
                    })
                    .collect();
                let outs: Vec<Output> = children
                    .into_iter()
                    .map(|c| c.wait_with_output().unwrap())
                    .collect();
                (url, outs)
            }
        })
        .collect();
    for run in runs {
        let run = run.unwrap();
        assert!(run.status.success(), "{}", text(&run));
    }
    let latest: Vec<i32> = (1..=schema::latest()).collect();
    assert_eq!(recorded_versions(&url).await, latest);
    for case in together {
        let (url, outs) = case.await;
        for out in &outs {
            assert!(out.status.success(), "{}", text(out));
        }
        let applied = outs
            .iter()
            .filter(|o| text(o).contains("applied    1"))
            .count();
        assert_eq!(applied, 1, "exactly one of the racing runs migrates");
        assert_eq!(recorded_versions(&url).await, latest);
    }
}

#[tokio::test]
async fn a_schema_newer_than_the_binary_is_refused_and_left_alone() {
    let url = pg::fresh_database().await;
    assert!(migrate(&["--queue-url", &url]).status.success());
    let newer = schema::latest() + 1;
    pg::connect(&url)
        .await
        .execute(
            "INSERT INTO tessera_schema (version, name) VALUES ($1, 'from the future')",
            &[&newer],
        )
        .await
        .unwrap();
    for args in [
        vec!["--queue-url", &url],
        vec!["--queue-url", &url, "--dry-run"],
    ] {
        let out = migrate(&args);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(
            text(&out).contains(&format!(
                "schema is at version {newer}, newer than this binary's {}",
                schema::latest()
            )),
            "{}",
            text(&out)
        );
    }
    let mut all: Vec<i32> = (1..=schema::latest()).collect();
    all.push(newer);
    assert_eq!(recorded_versions(&url).await, all);
}

#[tokio::test]
async fn a_database_that_commits_asynchronously_is_refused() {
    let url = pg::fresh_database().await;
    let name = url.rsplit('/').next().unwrap().to_string();
    pg::connect(&url)
        .await
        .batch_execute(&format!(
            "ALTER DATABASE {name} SET synchronous_commit = off"
        ))
        .await
        .unwrap();
    let out = migrate(&["--queue-url", &url]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("synchronous_commit = off")
            && text(&out).contains("set synchronous_commit = on"),
        "{}",
        text(&out)
    );
    assert!(recorded_versions_absent(&url).await, "nothing was migrated");
}

async fn recorded_versions_absent(url: &str) -> bool {
    pg::connect(url)
        .await
        .query_one("SELECT to_regclass('tessera_schema') IS NULL", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_bad_or_unreachable_url_says_what_to_check() {
    let bad = migrate(&["--queue-url", "postgres://a@b:notaport/c"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(
        text(&bad).contains("is not a PostgreSQL URL"),
        "{}",
        text(&bad)
    );

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://someone:secret-word@127.0.0.1:{port}/nothing");
    let gone = migrate(&["--queue-url", &url]);
    assert_eq!(gone.status.code(), Some(1), "{}", text(&gone));
    assert!(
        text(&gone).contains(&format!(
            "cannot reach the queue database at someone@127.0.0.1:{port}/nothing"
        )),
        "{}",
        text(&gone)
    );
    assert!(
        !text(&gone).contains("secret-word"),
        "the password is never printed"
    );
}

const NAMESPACES: [&str; 2] = ["ns1", "ns2"];
const SURFACES: [&str; 3] = ["s1", "s2", "s3"];
const QUEUES: [(&str, bool); 3] = [("q1", false), ("q2", true), ("q3", false)];
const KINDS: [&str; 2] = ["k1", "k2"];
const KEYS: [&str; 2] = ["a", "b"];
const EFFECTS: [EffectClass; 4] = [
    EffectClass::Read,
    EffectClass::WriteInternal,
    EffectClass::WriteRepo,
    EffectClass::Public,
];
const VISIBILITIES: [Visibility; 4] = [
    Visibility::Private,
    Visibility::SurfaceOnly,
    Visibility::AllowlistSurfaces,
    Visibility::Public,
];

fn name(s: &str) -> Name {
    Name::parse("name", s).unwrap()
}

/// A task's facts as indexes into the small universes above.
#[derive(Clone, Debug)]
struct Row {
    namespace: usize,
    queue: usize,
    kind: usize,
    effect: usize,
    visibility: usize,
    producer: Option<usize>,
    allowed: Vec<usize>,
    requester: usize,
}

fn row() -> impl Strategy<Value = Row> {
    (
        (0..2usize, 0..3usize, 0..2usize, 0..4usize),
        (0..4usize, prop::option::of(0..3usize)),
        (prop::collection::vec(0..3usize, 0..3), 0..2usize),
    )
        .prop_map(
            |((namespace, queue, kind, effect), (visibility, producer), (allowed, requester))| {
                Row {
                    namespace,
                    queue,
                    kind,
                    effect,
                    visibility,
                    producer,
                    allowed,
                    requester,
                }
            },
        )
}

fn subset<T: Copy + std::fmt::Debug + 'static>(all: &'static [T]) -> impl Strategy<Value = Vec<T>> {
    prop::collection::vec(any::<bool>(), all.len()).prop_map(move |keep| {
        all.iter()
            .zip(keep)
            .filter(|(_, k)| *k)
            .map(|(v, _)| *v)
            .collect()
    })
}

fn viewer() -> impl Strategy<Value = Viewer> {
    (
        (
            0..2usize,
            any::<bool>(),
            prop::bool::weighted(0.2),
            any::<bool>(),
        ),
        (subset(&NAMESPACES), subset(&SURFACES), subset(&QUEUES)),
        (subset(&KINDS), subset(&EFFECTS)),
    )
        .prop_map(
            |((key, owns, admin, claims), (ns, surfaces, queues), (kinds, effects))| Viewer {
                key: name(KEYS[key]),
                owns,
                admin,
                claims,
                namespaces: ns.into_iter().map(name).collect(),
                surfaces: surfaces.into_iter().map(name).collect(),
                queues: queues.into_iter().map(|(q, _)| name(q)).collect(),
                kinds: kinds.into_iter().map(name).collect(),
                effect_classes: effects.into_iter().collect::<HashSet<_>>(),
            },
        )
}

/// The Rust predicates' answers for `v` over `rows`: (sees, may claim).
fn rust_answers(v: &Viewer, rows: &[Row]) -> (Vec<i64>, Vec<i64>) {
    let mut sees = Vec::new();
    let mut claims = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let namespace = name(NAMESPACES[r.namespace]);
        let queue = name(QUEUES[r.queue].0);
        let kind = name(KINDS[r.kind]);
        let producer = r.producer.map(|p| name(SURFACES[p]));
        let allowed: Vec<Name> = r.allowed.iter().map(|a| name(SURFACES[*a])).collect();
        let facts = TaskFacts {
            namespace: &namespace,
            queue: &queue,
            server_queue: QUEUES[r.queue].1,
            kind: &kind,
            effect_class: EFFECTS[r.effect],
            envelope: Envelope {
                visibility: VISIBILITIES[r.visibility],
                owner: Some(KEYS[r.requester]),
                producer_surface: producer.as_ref(),
                allowed_surfaces: &allowed,
                quarantined: false,
            },
        };
        if v.sees_task(&facts) {
            sees.push(i as i64);
        }
        if v.claim_refusal(&facts).is_none() {
            claims.push(i as i64);
        }
    }
    (sees, claims)
}

async fn load(client: &tokio_postgres::Client, rows: &[Row]) {
    client
        .batch_execute("TRUNCATE tasks CASCADE")
        .await
        .unwrap();
    for (i, r) in rows.iter().enumerate() {
        let allowed: Vec<String> = r.allowed.iter().map(|a| SURFACES[*a].to_string()).collect();
        client
            .execute(
                "INSERT INTO tasks (id, namespace, queue, kind, effect_class, visibility, \
                 producer_surface, allowed_surfaces, requester, state, spec) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'queued', '{}')",
                &[
                    &(i as i64),
                    &NAMESPACES[r.namespace],
                    &QUEUES[r.queue].0,
                    &KINDS[r.kind],
                    &viewer::wire(EFFECTS[r.effect]),
                    &viewer::wire(VISIBILITIES[r.visibility]),
                    &r.producer.map(|p| SURFACES[p]),
                    &allowed,
                    &KEYS[r.requester],
                ],
            )
            .await
            .unwrap();
    }
}

async fn sql_answers(client: &tokio_postgres::Client, v: &Viewer) -> (Vec<i64>, Vec<i64>) {
    let grants = Grants::of(v);
    let ids = |sql: String, n: usize| {
        let grants = &grants;
        async move {
            client
                .query(&sql, &grants.params()[..n])
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<_, i64>(0))
                .collect::<Vec<i64>>()
        }
    };
    let sees = ids(
        format!(
            "SELECT id FROM tasks t WHERE {} ORDER BY id",
            Grants::sees("t", 1)
        ),
        viewer::SIGHT,
    )
    .await;
    let claims = ids(
        format!(
            "SELECT t.id FROM tasks t JOIN queues q ON q.name = t.queue WHERE {} ORDER BY t.id",
            Grants::may_claim("t", "q.server", 1)
        ),
        viewer::PARAMS,
    )
    .await;
    (sees, claims)
}

#[test]
fn the_grants_rules_in_sql_answer_as_the_rust_predicates_do() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(async {
        let url = pg::fresh_database().await;
        let db = tessera::database::Database::connect(&url).await.unwrap();
        schema::migrate(&db).await.unwrap();
        let client = pg::connect(&url).await;
        for (q, server) in QUEUES {
            client
                .execute(
                    "INSERT INTO queues (name, server, config) VALUES ($1, $2, '{}')",
                    &[&q, &server],
                )
                .await
                .unwrap();
        }
        client
    });
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let case = (
        prop::collection::vec(row(), 1..48),
        prop::collection::vec(viewer(), 1..12),
    );
    let (seen, claimed) = (std::cell::Cell::new(0usize), std::cell::Cell::new(0usize));
    runner
        .run(&case, |(rows, viewers)| {
            rt.block_on(load(&client, &rows));
            for v in &viewers {
                let (sees, claims) = rt.block_on(sql_answers(&client, v));
                let expected = rust_answers(v, &rows);
                prop_assert_eq!(&sees, &expected.0, "sight for {:?}", v);
                prop_assert_eq!(&claims, &expected.1, "claims for {:?}", v);
                seen.set(seen.get() + sees.len());
                claimed.set(claimed.get() + claims.len());
            }
            Ok(())
        })
        .unwrap();
    assert!(
        seen.get() > 0 && claimed.get() > 0,
        "the cases exercised both predicates"
    );
}
