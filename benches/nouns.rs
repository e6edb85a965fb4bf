//! Noun put and get with `--clients` concurrent clients, three ways on one
//! machine: the embedded root; shared nouns (`serve --queue-url
//! --objects-url`: refs in PostgreSQL, objects in S3); and the S3 server
//! alone (create-only PUTs and GETs of objects the same size, through the
//! same client crate), the floor the shared figures stand on. PostgreSQL
//! is a throwaway cluster (or `TESSERA_TEST_PG`); the S3 server is the
//! one at `TESSERA_TEST_S3` (`scripts/s3-server`, or s3s-fs), with a fresh
//! bucket (moto makes one for an unsigned request), or the empty bucket
//! `TESSERA_BENCH_BUCKET` names (s3s-fs: a directory made in its data
//! directory). Prints ops/s with p50 and p99 for each.
//!
//! ```sh
//! export TESSERA_TEST_S3=$(scripts/s3-server $$)
//! cargo bench --bench nouns -- --seconds 5
//! ```

use std::sync::Arc;

use clap::Parser;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutPayload};
use tessera::client::Client;

#[path = "../tests/support/pg.rs"]
#[allow(
    dead_code,
    reason = "the bench uses only the cluster and fresh databases"
)]
mod pg;
mod support;

#[derive(Parser, Debug)]
struct Args {
    /// Seconds per timed phase.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Ignored (cargo bench passes it).
    #[arg(long, hide = true)]
    bench: bool,
}

/// The S3 test server's credentials (moto and s3s-fs take these).
const KEY: &str = "testing";

/// Makes `bucket` on the S3 server at `endpoint`.
async fn make_bucket(endpoint: &str, bucket: &str) {
    let auth = format!(
        "AWS4-HMAC-SHA256 Credential={KEY}/20000101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0"
    );
    let r = Client::new(endpoint)
        .send(
            http::Method::PUT,
            &format!("/{bucket}"),
            None,
            &[("authorization", auth.as_str())],
        )
        .await
        .expect("the S3 server answers");
    assert!(
        r.status.is_success(),
        "creating bucket {bucket}: {}",
        r.status
    );
}

fn main() {
    let args = Args::parse();
    let endpoint = std::env::var("TESSERA_TEST_S3")
        .expect("set TESSERA_TEST_S3 to an S3 server's endpoint (export TESSERA_TEST_S3=$(scripts/s3-server $$))");
    println!(
        "tessera nouns: {} s per phase, {} clients, nproc {}, S3 at {endpoint}",
        args.seconds,
        args.clients,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let rt = tokio::runtime::Runtime::new().expect("client runtime");
    println!("-- embedded root");
    let daemon = support::start();
    rt.block_on(support::nouns(&daemon.admin, args.clients, args.seconds));
    drop(daemon);

    let (bucket, make) = match std::env::var("TESSERA_BENCH_BUCKET") {
        Ok(b) if !b.is_empty() => (b, false),
        _ => (format!("bench{}", std::process::id()), true),
    };
    let url = rt.block_on(async {
        if make {
            make_bucket(&endpoint, &bucket).await;
        }
        pg::fresh_database().await
    });
    println!("-- shared nouns (refs in PostgreSQL, objects in S3)");
    let settings = [
        ("endpoint", endpoint.clone()),
        ("access_key_id", KEY.into()),
        ("secret_access_key", KEY.into()),
        ("region", "us-east-1".into()),
        ("allow_http", "true".into()),
    ];
    let daemon = support::start_with(|c| {
        c.queue.url = Some(url);
        c.objects.url = Some(format!("s3://{bucket}"));
        c.objects.settings = settings
            .iter()
            .map(|(k, v)| (k.to_string(), toml::Value::String(v.clone())))
            .collect();
    });
    rt.block_on(support::nouns(&daemon.admin, args.clients, args.seconds));
    drop(daemon);

    println!("-- the S3 server alone");
    rt.block_on(async {
        let s3 = Arc::new(
            AmazonS3Builder::new()
                .with_endpoint(&endpoint)
                .with_allow_http(true)
                .with_region("us-east-1")
                .with_bucket_name(&bucket)
                .with_access_key_id(KEY)
                .with_secret_access_key(KEY)
                .build()
                .expect("an S3 client"),
        );
        let body = vec![b'x'; 260];
        let (put_s3, put_body) = (s3.clone(), body.clone());
        support::phase("s3 put", args.clients, args.seconds, move |client, i| {
            let (s3, body) = (put_s3.clone(), put_body.clone());
            async move {
                // Keys laid out as the daemon's objects are (a fan-out
                // directory, then the rest of a 64-digit name), so the
                // server files them as it files the daemon's.
                let name = format!("{:064x}", i * 1000 + client);
                let key = Key::from(format!("objects/sha256/{}/{}", &name[62..], &name[..62]));
                s3.put_opts(&key, PutPayload::from(body), PutMode::Create.into())
                    .await
                    .is_ok()
            }
        })
        .await
        .print();
        support::phase("s3 get", args.clients, args.seconds, move |client, i| {
            let s3 = s3.clone();
            async move {
                let key = Key::from(format!("alone/c{client}/k{}", i % 8));
                match s3.get(&key).await {
                    Ok(found) => found.bytes().await.is_ok(),
                    Err(_) => false,
                }
            }
        })
        .await
        .print();
    });
}
