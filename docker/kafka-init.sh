#!/usr/bin/env bash
# One-shot set-up of the compose broker's SASL_SSL listener, run by the kafka-init service in the
# apache/kafka image (it has Java's keytool and Kafka's storage tool), before the broker starts:
#
#  1. a throwaway CA; the broker's key and a certificate for kafka, localhost and 127.0.0.1 in a
#     PKCS#12 keystore; the CA in a PKCS#12 truststore and as ca.pem (what clients trust); the
#     store passwords in the files the image's configure script reads (KAFKA_SSL_*_CREDENTIALS);
#     the broker's JAAS file (KAFKA_OPTS names it);
#  2. the broker's storage formatted with the SCRAM-SHA-512 user in its bootstrap metadata: KRaft
#     keeps SCRAM users in the metadata log (`kafka-storage format --add-scram`, KIP-900). The
#     broker's own start-up then finds the storage formatted, which the image accepts.
#
# Each step is skipped when already done (another `up` on the same volumes).
set -euo pipefail

: "${CLUSTER_ID:?}" "${KAFKA_NODE_ID:?}" "${KAFKA_LOG_DIRS:?}" "${KAFKA_CONTROLLER_QUORUM_VOTERS:?}"
: "${SCRAM_USER:?}" "${SCRAM_PASSWORD:?}"
SECRETS_DIR=${SECRETS_DIR:-/etc/kafka/secrets}
KAFKA_STORAGE_SH=${KAFKA_STORAGE_SH:-/opt/kafka/bin/kafka-storage.sh}
SANS=dns:kafka,dns:localhost,ip:127.0.0.1
DAYS=3650

mkdir -p "$SECRETS_DIR" "$KAFKA_LOG_DIRS"
cd "$SECRETS_DIR"

if [ ! -f kafka.keystore.p12 ]; then
    echo "kafka-init: generating the CA, the broker's keystore and the truststore"
    work=$(mktemp -d)
    pass=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
    kt() { keytool -noprompt -storetype PKCS12 -storepass "$pass" "$@"; }
    kt -genkeypair -keystore "$work/ca.p12" -alias ca -dname "CN=kafka-eos-demo test CA" \
        -keyalg RSA -keysize 2048 -validity "$DAYS" -ext bc:c -ext ku:c=keyCertSign,cRLSign
    kt -exportcert -rfc -keystore "$work/ca.p12" -alias ca -file "$work/ca.pem"
    kt -genkeypair -keystore "$work/kafka.keystore.p12" -alias kafka -dname "CN=kafka" \
        -keyalg RSA -keysize 2048 -validity "$DAYS" -ext "san=$SANS"
    kt -certreq -keystore "$work/kafka.keystore.p12" -alias kafka -file "$work/kafka.csr"
    kt -gencert -keystore "$work/ca.p12" -alias ca -infile "$work/kafka.csr" \
        -outfile "$work/kafka.crt" -rfc -validity "$DAYS" -ext "san=$SANS" \
        -ext ku:c=digitalSignature,keyEncipherment -ext eku=serverAuth
    # The CA first, so that the signed certificate's chain is complete in the keystore.
    kt -importcert -keystore "$work/kafka.keystore.p12" -alias ca -file "$work/ca.pem"
    kt -importcert -keystore "$work/kafka.keystore.p12" -alias kafka -file "$work/kafka.crt"
    kt -importcert -keystore "$work/kafka.truststore.p12" -alias ca -file "$work/ca.pem"
    for f in keystore_creds key_creds truststore_creds; do printf '%s' "$pass" > "$work/$f"; done
    cat > "$work/kafka_server_jaas.conf" <<'JAAS'
KafkaServer {
    org.apache.kafka.common.security.scram.ScramLoginModule required;
};
JAAS
    # The keystore last: its presence says the whole set is there.
    for f in ca.pem kafka.truststore.p12 keystore_creds key_creds truststore_creds \
        kafka_server_jaas.conf kafka.keystore.p12; do
        mv "$work/$f" "$SECRETS_DIR/$f"
    done
    rm -rf "$work"
fi

if [ ! -f "$KAFKA_LOG_DIRS/meta.properties" ]; then
    echo "kafka-init: formatting $KAFKA_LOG_DIRS with the SCRAM-SHA-512 user $SCRAM_USER"
    # Only what formatting reads: the node, its roles, the controller and the log directory.
    config=$(mktemp)
    cat > "$config" <<PROPS
process.roles=broker,controller
node.id=$KAFKA_NODE_ID
controller.quorum.voters=$KAFKA_CONTROLLER_QUORUM_VOTERS
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
advertised.listeners=PLAINTEXT://kafka:9092
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$KAFKA_LOG_DIRS
PROPS
    "$KAFKA_STORAGE_SH" format --cluster-id "$CLUSTER_ID" --config "$config" \
        --add-scram "SCRAM-SHA-512=[name=$SCRAM_USER,password=$SCRAM_PASSWORD]"
    rm -f "$config"
fi

# Run as root (fresh named volumes are root's): hand everything to the broker's user.
if [ "$(id -u)" = 0 ] && id appuser > /dev/null 2>&1; then
    chown -R appuser:root "$SECRETS_DIR" "$KAFKA_LOG_DIRS"
fi
echo "kafka-init: done"
