// Validate a glTF or GLB file with the Khronos glTF Validator (npm gltf-validator); print its report as JSON.
// Usage: NODE_PATH=<folder holding gltf-validator> node tests/gltf_validate.js FILE
const fs = require("fs");
const validator = require("gltf-validator");

validator.validateBytes(new Uint8Array(fs.readFileSync(process.argv[2])), { maxIssues: 100 })
  .then((report) => console.log(JSON.stringify(report)))
  .catch((error) => { console.error(String(error)); process.exit(1); });
